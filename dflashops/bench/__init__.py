"""Benchmarks: the saved result model, workloads, the streaming client and its statistics.

``models`` is the versioned ``BenchReport`` (JSON keys named as ``vllm bench serve`` names them),
``workload`` the prompt sets, ``client`` the async streaming OpenAI client (``http1`` its lean
HTTP/1.1 transport for plain-http servers), ``stats`` the per-level aggregation, ``runner`` the
whole run against one server, ``server_log`` the log window of a level and its check against
the counters, ``target`` what ``bench NAME`` resolves from inventory, playbook and
``deployed.json``, and ``container`` the ``bench NAME`` core (``bench_container``).
"""
