"""Benchmarks: the saved result model, workloads, the streaming client and its statistics.

``models`` is the versioned ``BenchReport`` (JSON keys named as ``vllm bench serve`` names them),
``workload`` the prompt sets, ``client`` the async streaming OpenAI client, ``stats`` the per-level
aggregation and ``runner`` the whole run against one server.
"""
