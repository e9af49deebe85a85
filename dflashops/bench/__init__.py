"""Benchmarks: the saved result model, workloads, the streaming client and its statistics.

- ``request``: ``BenchRequest``, what ``bench`` was asked (container or URL, settings, labels,
  roofline); ``entry``: ``run_bench``, the one core call for it.
- ``settings``: ``BenchSettings`` (workload, levels, requests) from a playbook and overrides.
- ``container``: ``bench NAME`` over the deployment contract (manifest, log over SSH);
  ``target``: what the endpoint and ``ResolvedConfig`` are, from inventory, playbook and
  ``deployed.json``.
- ``runner``: the whole run against one server; ``level``: one concurrency level (warm-up,
  measured requests, counters, log window); ``progress``: what a run tells its caller;
  ``stopped``: a server that stops answering mid-run (``BenchInterrupted`` carries the partial
  report: every caller fails by default, ``bench`` saves it).
- ``endpoint``: where requests go; ``client``: the streaming OpenAI client (aiohttp);
  ``server_api``: ``/v1/models``, ``/version``, ``/metrics``, prefix-cache reset (httpx).
- ``models``: the versioned ``BenchReport`` (JSON keys as ``vllm bench serve`` names them);
  ``stats``: per-level aggregation; ``workload``: prompt sets; ``server_log``: a level's log
  window and its check against the counters; ``roofline``: the bandwidth roofline of a report.
"""
