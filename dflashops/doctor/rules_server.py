"""The server process: is it the deployed one (config drift), is its KV cache full or
preempting, is prefix caching off."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Finding
from dflashops.doctor.rules import RuleResult, ok, skip

KV_FULL = 0.95
# flags whose value is JSON: compared as data, not text (key order is not a difference)
JSON_FLAGS = frozenset({"--speculative-config", "--default-chat-template-kwargs"})


def flags(argv: list[str]) -> dict[str, Any]:
    """``--flag value`` / ``--flag=value`` / bare ``--flag`` as a map (the last one wins);
    what comes between the interpreter and the first ``--flag`` (``-m MODULE serve MODEL``) is
    ``_command``. The interpreter's own path is left out: a venv symlink may name it
    differently in the process table."""
    out: dict[str, Any] = {}
    first = next((i for i, a in enumerate(argv) if a.startswith("--")), len(argv))
    out["_command"] = " ".join(argv[1:first])
    index = first
    while index < len(argv):
        arg = argv[index]
        if not arg.startswith("-"):
            index += 1
            continue
        value: Any
        if "=" in arg:
            name, value = arg.split("=", 1)
            index += 1
        elif index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            name, value = arg, argv[index + 1]
            index += 2
        else:
            name, value = arg, True
            index += 1
        if name in JSON_FLAGS and isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        out[name] = value
    return out


def _show(value: Any) -> str:
    if value is None:
        return "(absent)"
    if value is True:
        return "(set)"
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def config_drift(facts: DoctorFacts) -> RuleResult:
    """The running command line against the one ``deployed.json`` records."""
    if facts.running_argv is None:
        return RuleResult(
            [
                Finding(
                    rule="server",
                    severity="critical",
                    title="no server process runs in the container",
                    evidence=("the pidfile names no live process",),
                    fix=f"dflashops launch {facts.container}",
                )
            ]
        )
    if facts.manifest is None:
        return skip("no deployed.json: nothing to compare the running server with")
    deployed, running = flags(facts.manifest.argv), flags(facts.running_argv)
    changed = sorted(
        name for name in deployed.keys() | running.keys() if deployed.get(name) != running.get(name)
    )
    if not changed:
        return ok(f"the running command line is the deployed one ({len(running) - 1} flags)")
    return RuleResult(
        [
            Finding(
                rule="drift",
                severity="critical",
                title=f"the running server is not the deployed one: {len(changed)} argument(s) "
                "differ",
                evidence=tuple(
                    f"{'command' if name == '_command' else name}: running "
                    f"{_show(running.get(name))}, deployed {_show(deployed.get(name))}"
                    for name in changed
                ),
                fix=f"dflashops launch {facts.container} (serves the playbook again, as deployed)",
                details={"differ": changed},
            )
        ]
    )


def kv_cache(facts: DoctorFacts) -> RuleResult:
    counters = facts.counters
    log_usage = [
        w.kv_cache_usage_pct / 100.0
        for w in (facts.log.throughput_windows if facts.log else [])
        if w.kv_cache_usage_pct is not None
    ]
    log_preempted = sum(
        w.preemptions or 0 for w in (facts.log.throughput_windows if facts.log else [])
    )
    if counters is None and not log_usage:
        return skip("no /metrics and no stats lines in the log")
    usage = max(
        [u for u in [counters.kv_cache_usage if counters else None, *log_usage] if u is not None],
        default=None,
    )
    preempted = (counters.preemptions if counters else None) or 0
    evidence = []
    if preempted:
        evidence.append(f"vllm:num_preemptions_total rose by {preempted} over the window")
    if log_preempted and not preempted:
        evidence.append(f"the server log's stats lines count {log_preempted} preemption(s)")
    if usage is not None and usage >= KV_FULL:
        evidence.append(f"KV cache usage peaked at {usage:.0%}")
    if not evidence:
        shown = "unknown" if usage is None else f"{usage:.0%}"
        return ok(f"KV cache usage {shown}, no preemptions")
    return RuleResult(
        [
            Finding(
                rule="kv-cache",
                severity="warning",
                title="KV cache full: requests are preempted and recomputed",
                evidence=tuple(evidence),
                fix=f"dflashops launch {facts.container} --set server.gpu_memory_utilization=0.95 "
                "(or a smaller max_model_len, or fewer concurrent requests)",
                details={"kv_cache_usage": usage, "preemptions": preempted or log_preempted},
            )
        ]
    )


def prefix_cache(facts: DoctorFacts) -> RuleResult:
    argv = facts.running_argv or []
    off_flag = "--no-enable-prefix-caching" in argv
    from_metrics = facts.counters.prefix_caching if facts.counters else None
    if not off_flag and from_metrics is None:
        return skip("prefix caching state unknown (no vllm:cache_config_info)")
    if not off_flag and from_metrics:
        return ok("prefix caching on")
    evidence = []
    if off_flag:
        evidence.append("--no-enable-prefix-caching on the running command line")
    if from_metrics is False:
        evidence.append('vllm:cache_config_info enable_prefix_caching="False"')
    return RuleResult(
        [
            Finding(
                rule="prefix-cache",
                severity="warning",
                title="prefix caching off: every shared prompt prefix is computed again",
                evidence=tuple(evidence),
                fix=f"drop --no-enable-prefix-caching from server.extra_args and "
                f"`dflashops launch {facts.container}`",
            )
        ]
    )


def strays(facts: DoctorFacts) -> RuleResult:
    """Processes an earlier server left in its process group (its API server killed, its
    engine and workers re-parented): they keep their memory, GPU memory too."""
    if not facts.strays:
        return ok("no process of an earlier server is left")
    held = sum(p.rss_mb for p in facts.strays)
    evidence = tuple(f"pid {p.pid} ({p.rss_mb} MB): {p.command[:100]}" for p in facts.strays[:8])
    return RuleResult(
        findings=[
            Finding(
                rule="strays",
                severity="warning",
                title=f"{len(facts.strays)} process(es) of an earlier server still run ({held} MB)",
                evidence=evidence,
                fix=f"dflashops launch {facts.container} (ends them; the running server stays)",
                details={"pids": [p.pid for p in facts.strays], "rss_mb": held},
            )
        ]
    )
