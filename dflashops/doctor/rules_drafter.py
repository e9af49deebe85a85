"""Rules about the drafter itself: acceptance against its reference (with the config diff),
the thinking mode it was trained for, and engine versions or runners that break it."""

from __future__ import annotations

from typing import Any

from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Finding
from dflashops.doctor.rules import RuleResult, ok, rates, skip
from dflashops.drafter.diff import DiffLine, diff_against_entry
from dflashops.drafter.engine import DrafterShape, engine_findings, parse_engine
from dflashops.drafter.formats import SPECULATORS, ZLAB_ONLY, checked_view, config_format, file_key
from dflashops.drafter.registry import RegistryEntry
from dflashops.errors import DrafterError
from dflashops.launch.args import NON_CAUSAL_BACKENDS
from dflashops.playbook.engine_methods import method_problem
from dflashops.server.argv import flag_value

# Methods whose drafter is a trained model: matched to its target it accepts its first token
# far more often than 1 in 4. Every published DFlash acceptance length (2.93 at k=8 on MT-Bench,
# vLLM PR #32206; 6.07 on GSM8K) implies a position-0 rate of at least (AL - 1) / k ≈ 0.24, and in
# practice position 0 is the highest; the lab's drafter reaches 0.61-0.84.
METHOD_POSITION0: dict[str, float] = {
    "dflash": 0.3,
    "eagle": 0.3,
    "eagle3": 0.3,
    "mtp": 0.3,
    "draft_model": 0.3,
}
# "far below": under this share of what the reference says position 0 reaches
FAR_BELOW = 0.5
# fewer drafts than this and the rate is noise
MIN_DRAFTS = 20
# vLLM 0.25.x: a speculators-trained DFlash drafter accepts ~0% on the V2 model runner
# (vllm-project/vllm#49559)
V2_RUNNER_BROKEN = ((0, 25, 0), (0, 26, 0))


def config_diff(config: dict[str, Any], entry: RegistryEntry) -> list[DiffLine]:
    """The reference's keys whose value differs, read where the engine reads them and named
    where the file holds them (what ``drafter diff --against`` shows)."""
    lines = diff_against_entry(checked_view(config), entry)
    if config_format(config) == SPECULATORS:
        lines = [line for line in lines if not (line.key in ZLAB_ONLY and line.status == "missing")]
    renamed = [
        DiffLine(
            file_key(line.key, config),
            line.status,
            line.drafter,
            line.other,
            line.certain,
            line.basis,
        )
        for line in lines
    ]
    return sorted(renamed, key=lambda line: (not line.certain, line.key))


def _expected_position0(facts: DoctorFacts) -> tuple[float, str] | None:
    entry = facts.entry
    if entry is not None:
        # the measurement on the workload the server was measured on first (a chat prompt and
        # a batch of completions accept differently), then the entry's order
        workload = (facts.acceptance.workload or "") if facts.acceptance else ""
        items = sorted(
            entry.expected_acceptance,
            key=lambda item: not (workload and item.workload.split(" ", 1)[0] == workload),
        )
        for item in items:
            floor = item.position0_floor
            if floor is not None:
                shown = (
                    f"position 0 {floor:.2f}"
                    if item.per_position
                    else f"acceptance length {item.acceptance_length:.2f} at k={item.k} "
                    f"(position 0 ≥ {floor:.2f})"
                )
                sources = ", ".join(entry.sources[s].split(" ", 1)[0] for s in item.sources)
                return floor, f"{entry.name} reaches {shown} on {item.workload} ({sources})"
    method = facts.method or ""
    if method in METHOD_POSITION0:
        floor = METHOD_POSITION0[method]
        return floor, f"a {method} drafter matched to its target accepts position 0 ≥ {floor:.2f}"
    return None


def _forced(facts: DoctorFacts) -> tuple[str, ...]:
    manifest = facts.manifest
    if manifest is None or not manifest.forced:
        return ()
    return (f"deployed with launch --force over drafter check {manifest.drafter_validation}",)


def drafter_config(facts: DoctorFacts) -> RuleResult:
    """Position-0 acceptance far below the reference → the config, key by key against it."""
    acceptance = facts.acceptance
    diff = config_diff(facts.drafter.config, facts.entry) if facts.drafter and facts.entry else []
    certain = [line for line in diff if line.certain]
    diff_lines = tuple(
        f"{line.key}: {line.drafter} (reference {line.other}"
        f"{'' if line.certain else ', not certain'})"
        for line in diff
    )
    expected = _expected_position0(facts)
    low = None
    measured = acceptance is not None and bool(acceptance.per_position)
    if measured and acceptance is not None and acceptance.num_drafts >= MIN_DRAFTS:
        r0 = acceptance.per_position[0]
        low = r0 if expected is not None and r0 < FAR_BELOW * expected[0] else None
    fix = f"dflashops drafter push {facts.container} && dflashops launch {facts.container}"
    where = f"{facts.drafter.path}/config.json" if facts.drafter else "the drafter's config.json"
    details = {
        "diff": [
            {
                "key": d.key,
                "status": d.status,
                "found": d.drafter,
                "reference": d.other,
                "certain": d.certain,
            }
            for d in diff
        ],
        "reference": facts.entry.name if facts.entry else None,
    }
    if low is not None and acceptance is not None and expected is not None:
        evidence = (
            f"position-0 acceptance {low:.3f} over {acceptance.num_drafts} drafts "
            f"({acceptance.source}); per position {rates(acceptance.per_position)}",
            f"expected: {expected[1]}",
        )
        if certain:
            return RuleResult(
                [
                    Finding(
                        rule="drafter-config",
                        severity="critical",
                        title=f"drafter config mismatch: {len(certain)} key(s) differ from "
                        f"{facts.entry.name if facts.entry else 'the reference'}",
                        evidence=(
                            *evidence,
                            *_forced(facts),
                            f"{where} against the reference:",
                            *diff_lines,
                        ),
                        fix=fix,
                        impact=1.0 - low / expected[0],
                        details=details,
                    )
                ]
            )
        reason = (
            f"{where} agrees with {facts.entry.name} on every key it is certain of"
            if facts.entry and facts.drafter
            else "no registry entry to compare the config with (set drafter.ref)"
        )
        return RuleResult(
            [
                Finding(
                    rule="drafter-config",
                    severity="critical",
                    title="position-0 acceptance far below what the drafter should reach",
                    evidence=(*evidence, reason, *diff_lines),
                    fix="see the thinking-mode and engine findings; "
                    "`dflashops drafter check` the drafter against its target",
                    impact=1.0 - low / expected[0],
                    details=details,
                )
            ]
        )
    if certain:
        shown = (
            f"position-0 acceptance {acceptance.per_position[0]:.3f}"
            if acceptance and acceptance.per_position
            else "acceptance not measured"
        )
        return RuleResult(
            [
                Finding(
                    rule="drafter-config",
                    severity="warning",
                    title=f"drafter config differs from {facts.entry.name if facts.entry else ''}"
                    f" on {len(certain)} certain key(s)",
                    evidence=(shown, f"{where} against the reference:", *diff_lines),
                    fix=fix,
                    details=details,
                )
            ]
        )
    if acceptance is None or not acceptance.per_position:
        return skip("no spec-decode acceptance measured")
    if acceptance.num_drafts < MIN_DRAFTS:
        return skip(f"only {acceptance.num_drafts} drafts observed (need {MIN_DRAFTS})")
    if expected is None:
        return skip(f"no reference acceptance for method {facts.method}")
    return ok(f"position 0 {acceptance.per_position[0]:.2f} vs expected ≥ {expected[0]:.2f}")


def thinking_mode(facts: DoctorFacts) -> RuleResult:
    """The workload's thinking mode against what the drafter was trained on."""
    trained = facts.entry.trained_for if facts.entry else None
    if trained is None:
        return skip("the registry entry does not say what thinking mode the drafter was trained on")
    sent = facts.workload_thinking
    if sent is None:
        return skip(
            "the workload does not set chat_template_kwargs.enable_thinking (template default)"
        )
    if sent == trained.thinking:
        return ok(f"thinking {'on' if sent else 'off'}, as trained")
    on_off = {True: "on", False: "off"}
    return RuleResult(
        [
            Finding(
                rule="thinking-mode",
                severity="warning",
                title=f"workload thinking {on_off[sent]}, drafter trained with thinking "
                f"{on_off[trained.thinking]}",
                evidence=(
                    f"{facts.workload_source}: chat_template_kwargs.enable_thinking = "
                    f"{str(sent).lower()}",
                    f"{facts.entry.name if facts.entry else ''} trained_for.thinking = "
                    f"{str(trained.thinking).lower()} ({trained.basis}; "
                    + ", ".join(
                        (facts.entry.sources[s] if facts.entry else s).split(" ", 1)[0]
                        for s in trained.sources
                    )
                    + ")",
                ),
                fix=f"send enable_thinking={str(trained.thinking).lower()} "
                f"(playbook bench.thinking), or train a drafter for this mode: "
                f"`dflashops drafter train {facts.container}` with train.data.thinking="
                f"{str(sent).lower()}",
                details={"workload_thinking": sent, "trained_thinking": trained.thinking},
            )
        ]
    )


def _shape(config: dict[str, Any]) -> DrafterShape:
    view = checked_view(config)
    kinds = view.get("layer_types")
    kinds = [str(k) for k in kinds] if isinstance(kinds, list) else []
    dflash = view.get("dflash_config")
    anchor = isinstance(dflash, dict) and dflash.get("sample_from_anchor") is True
    return DrafterShape(
        has_sliding="sliding_attention" in kinds,
        has_full=not kinds or "full_attention" in kinds,
        sample_from_anchor=anchor,
    )


def _method_missing(facts: DoctorFacts) -> Finding | None:
    """A critical finding when the engine release cannot serve the running method at all."""
    assert facts.engine and facts.engine_version
    try:
        problem = method_problem(
            facts.engine, facts.engine_version, facts.method or "none", facts.device
        )
    except (KeyError, ValueError):
        return None  # a method or release dflashops has no table entry for: nothing to say
    if problem is None:
        return None
    return Finding(
        rule="engine",
        severity="critical",
        title=f"{facts.engine}=={facts.engine_version} cannot serve {facts.method} here",
        evidence=(problem,),
        fix=f"set engine.version in the playbook to a release named above and "
        f"`dflashops launch {facts.container}`",
    )


def engine_support(facts: DoctorFacts) -> RuleResult:
    """Engine versions without the method at all (``dflashops.playbook.engine_methods``: a
    server started by hand, or deployed before the release was known); for DFlash, versions
    known to ignore a key the drafter relies on, runners and attention backends known to break
    it (``dflashops.drafter.engine`` and the vLLM notes)."""
    if not facts.engine or not facts.engine_version:
        return skip("engine version unknown (no deployed.json)")
    missing = _method_missing(facts)
    if missing is not None:
        return RuleResult([missing])
    if facts.method != "dflash":
        engine_text = f"{facts.engine}=={facts.engine_version}"
        return ok(f"{engine_text} serves method {facts.method or 'none'} on {facts.device}")
    try:
        engine = parse_engine(f"{facts.engine}=={facts.engine_version}")
    except DrafterError as exc:
        return skip(exc.one_line())
    found: list[Finding] = []
    if facts.drafter is not None:
        shape = _shape(facts.drafter.config)
        env = {**(facts.manifest.env if facts.manifest else {}), **facts.running_env}
        # an "info" finding is the V2 runner a mixed drafter needs: launch sets it, and without
        # it the server would not have started at all
        for f in engine_findings(engine, shape)[0]:
            if f.severity == "info":
                continue
            found.append(
                Finding(
                    rule="engine",
                    severity="critical" if f.severity == "error" else "warning",
                    title=f"{engine}: {f.key.removeprefix('engine.')} needs {f.expected}",
                    evidence=(f.why,),
                    fix=f"set engine.version in the playbook to {f.expected} and "
                    f"`dflashops launch {facts.container}`",
                    details={"key": f.key, "expected": f.expected, "found": f.found},
                )
            )
        env_v2 = env.get("VLLM_USE_V2_MODEL_RUNNER") == "1"
        low, high = V2_RUNNER_BROKEN
        if (
            env_v2
            and low <= engine.version < high
            and config_format(facts.drafter.config) == SPECULATORS
        ):
            found.append(
                Finding(
                    rule="engine",
                    severity="critical",
                    title=f"{engine} on the V2 model runner drops a speculators-trained DFlash "
                    "drafter's acceptance to ~0",
                    evidence=(
                        "VLLM_USE_V2_MODEL_RUNNER=1 in the server's environment",
                        f"{facts.drafter.path} is in the speculators layout",
                        "https://github.com/vllm-project/vllm/issues/49559",
                    ),
                    fix="drop VLLM_USE_V2_MODEL_RUNNER from server.env, or use vllm>=0.26.0",
                )
            )
    backend = flag_value(facts.running_argv or [], "--attention-backend")
    if engine.name == "vllm" and backend and backend.upper() not in NON_CAUSAL_BACKENDS:
        found.append(
            Finding(
                rule="engine",
                severity="critical",
                title=f"attention backend {backend} lacks the non-causal attention DFlash needs",
                evidence=(f"--attention-backend {backend} on the running command line",),
                fix=f"`dflashops launch {facts.container} --set server.attention_backend="
                "FLASH_ATTN`",
            )
        )
    if found:
        return RuleResult(found)
    return ok(f"{engine} reads every key this drafter relies on")
