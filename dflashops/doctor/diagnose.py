"""Every rule over one set of facts: ranked findings and what each rule concluded.

Pure: no network, no files. ``doctor`` calls it on gathered facts, tests on recorded ones."""

from __future__ import annotations

from dflashops.doctor import (
    rules_drafter,
    rules_drafter_check,
    rules_gpu,
    rules_members,
    rules_server,
    rules_tune,
)
from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Check, Finding, rank
from dflashops.doctor.rules import Rule, skip

# (name, rule) in the order they run; the ranking, not this order, decides what shows first
RULES: tuple[tuple[str, Rule], ...] = (
    ("server", rules_server.config_drift),
    ("strays", rules_server.strays),
    ("drafter-config", rules_drafter.drafter_config),
    ("drafter-check", rules_drafter_check.drafter_check),
    ("thinking-mode", rules_drafter.thinking_mode),
    ("engine", rules_drafter.engine_support),
    ("tune", rules_tune.tune_gain),
    ("roofline", rules_gpu.roofline_gap),
    ("gpu", rules_gpu.gpu_state),
    ("p2p", rules_gpu.p2p),
    ("eager", rules_gpu.eager_mode),
    ("kv-cache", rules_server.kv_cache),
    ("prefix-cache", rules_server.prefix_cache),
    ("members", rules_members.members_alive),
    ("member-network", rules_members.member_interfaces),
    ("member-throughput", rules_members.member_throughput),
)
# a server that does not run measures nothing: these rules then say so instead of guessing
NEEDS_SERVER = frozenset({"drafter-config", "tune", "roofline", "kv-cache", "prefix-cache"})
# cross-node rules: a single container has no members, so they are not listed at all (three
# "not checked" lines on every single-container report would say nothing)
PLACEMENT_ONLY = frozenset({"members", "member-network", "member-throughput"})


def diagnose(facts: DoctorFacts) -> tuple[list[Finding], list[Check]]:
    findings: list[Finding] = []
    checks: list[Check] = []
    drafter_broken = False
    for name, rule in RULES:
        if facts.placement is None and name in PLACEMENT_ONLY:
            continue
        if facts.running_argv is None and name in NEEDS_SERVER:
            result = skip("no server running")
        elif name == "tune" and drafter_broken:
            # tuning k for a drafter that is served wrong optimises noise
            result = skip("the drafter is served wrong (see drafter-config): fix that first")
        else:
            result = rule(facts)
        if name == "drafter-config":
            drafter_broken = any(f.severity == "critical" for f in result.findings)
        findings.extend(result.findings)
        if result.findings:
            checks.append(Check(rule=name, outcome="found", note=f"{len(result.findings)}"))
        elif result.skipped:
            checks.append(Check(rule=name, outcome="skipped", note=result.skipped))
        else:
            checks.append(Check(rule=name, outcome="ok", note=result.note))
    return rank(findings), checks
