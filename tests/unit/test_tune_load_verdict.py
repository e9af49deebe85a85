"""``tune --load``'s launch plan within its budget, and the verdict on the verified schedule."""

from __future__ import annotations

import json

import pytest

from dflashops.errors import TuneInputError
from dflashops.tune.load_plan import LoadTunePlan
from dflashops.tune.load_runs import LevelRun
from dflashops.tune.load_schedule import ScheduleDecision, decide
from dflashops.tune.load_section import load_section
from dflashops.tune.load_settings import LoadSettings
from dflashops.tune.load_verdict import MAX_LOSS, judge_schedule
from dflashops.tune.schedule import schedule_support
from tests.unit.test_tune_load import CPU_CURVE, LEVELS, bench, cpu_step

OLD_K = 8
VLLM = schedule_support("vllm", "0.32.0")


def plan(budget: int, **settings: object) -> LoadTunePlan:
    return LoadTunePlan(
        settings=LoadSettings.model_validate({"levels": LEVELS, "tolerance": 0, **settings}),
        budget=budget,
        current_k=OLD_K,
    )


def run_plan(tuner: LoadTunePlan) -> tuple[list[int], list[LevelRun]]:
    """The live loop's shape: launch what the plan asks, bench every level, until it stops."""
    launches: list[int] = []
    runs: list[LevelRun] = []
    while (probe := tuner.next_probe(runs)) is not None:
        assert probe.k not in launches, "a k is launched once"
        launches.append(probe.k)
        runs += bench(cpu_step, CPU_CURVE, probe.k)
    return launches, runs


# --- the plan ---------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [2, 3, 4, 5, 8])
def test_the_plan_spends_at_most_its_budget(budget: int) -> None:
    launches, runs = run_plan(plan(budget))
    assert len(launches) <= budget
    # the old concurrency-1 k first, then speculation off: both are what the schedule must beat
    assert launches[:2] == [OLD_K, 0]
    assert {run.level for run in runs} == set(LEVELS)


def test_the_default_budget_measures_where_the_model_expects_to_gain() -> None:
    tuner = plan(4)
    launches, runs = run_plan(tuner)
    assert launches == [OLD_K, 0, 1, 3]
    probes = []
    seen: list[LevelRun] = []
    for k in launches:
        probe = tuner.next_probe(seen)
        assert probe is not None and probe.k == k
        probes.append(probe.reason)
        seen += bench(cpu_step, CPU_CURVE, k)
    assert "concurrency-1 k*" in probes[0] and "stops paying" in probes[1]
    assert "step-time slope" in probes[2] and probes[3] == "k*=3 predicted at c=2"
    assert tuner.next_probe(runs) is None
    result = tuner.recommend(runs)
    assert result.k_by_level == {1: 4, 2: 3, 4: 2, 8: 1, 16: 1, 32: 0}


def test_a_larger_budget_stops_once_nothing_unmeasured_gains() -> None:
    launches, _ = run_plan(plan(12))
    assert len(launches) < 12
    assert set(launches) >= {OLD_K, 0, 1, 2, 3}


def test_an_old_k_at_the_low_end_anchors_with_the_high_end() -> None:
    tuner = LoadTunePlan(settings=LoadSettings(levels=(1, 4), k_max=6), budget=3, current_k=1)
    runs = [*bench(cpu_step, CPU_CURVE, 1, (1, 4)), *bench(cpu_step, CPU_CURVE, 0, (1, 4))]
    probe = tuner.next_probe(runs)
    assert probe is not None and probe.k == 6


# --- the verdict --------------------------------------------------------------------------------


def scheduled() -> tuple[ScheduleDecision, list[LevelRun], int]:
    """The CPU machine tuned with the default budget: its decision, static runs and fallback."""
    tuner = plan(4)
    _, runs = run_plan(tuner)
    result = tuner.recommend(runs)
    assert result.single_k is not None
    return decide(result, VLLM, 64), runs, result.single_k.k


def verify_bench(decision: ScheduleDecision, losses: dict[int, float]) -> list[LevelRun]:
    """The schedule's bench: each level at its scheduled k, less ``losses[level]``."""
    out = []
    for level in LEVELS:
        k = decision.schedule.k_at(level)
        tokens = CPU_CURVE.tokens_per_step(k)
        tok_s = level * tokens / cpu_step(level, k) * (1.0 - losses.get(level, 0.0))
        out.append(LevelRun(level=level, k=decision.k, output_tok_s=tok_s))
    return out


def test_a_schedule_within_noise_of_the_best_static_k_is_kept() -> None:
    decision, runs, fallback = scheduled()
    verdict = judge_schedule(
        decision,
        runs,
        verify_bench(decision, {8: 0.04}),
        old_k=OLD_K,
        fallback_k=fallback,
    )
    assert verdict.accepted and verdict.kept == "schedule"
    assert verdict.schedule == decision.schedule.as_vllm()
    assert verdict.k == decision.schedule.max_k
    assert verdict.worst_level == 8 and verdict.worst_loss == pytest.approx(0.04)
    assert "within 5% of the best static k at every level (worst c=8: -4.0% against k=1)" in (
        verdict.sentence
    )
    # c=4 runs k=2, which no static launch measured: the schedule beats the best measured there
    c4 = next(v for v in verdict.levels if v.level == 4)
    assert c4.schedule_k == 2 and c4.best_static_k == 3 and c4.loss < 0
    # against the fixed old k: the schedule wins everywhere on this machine, most at c=32
    gains = {v.level: v.vs_old for v in verdict.levels}
    assert all(g is not None and g > 0 for g in gains.values())
    assert "against the fixed old k=8: +" in verdict.sentence
    assert verdict.playbook_fields() == {
        "num_speculative_tokens": decision.schedule.max_k,
        "speculative_schedule": decision.schedule.as_vllm(),
    }


def test_the_vllm_49548_shape_is_refused_naming_the_level_and_the_loss() -> None:
    decision, runs, fallback = scheduled()
    # aggregate throughput collapses once concurrency crosses a threshold: c=8 at -30 %
    verdict = judge_schedule(
        decision, runs, verify_bench(decision, {8: 0.30}), old_k=OLD_K, fallback_k=fallback
    )
    assert not verdict.accepted and verdict.kept == "single_k"
    assert verdict.k == fallback == 1 and verdict.schedule is None
    assert verdict.worst_level == 8 and verdict.worst_loss == pytest.approx(0.30)
    assert verdict.sentence.startswith(
        "schedule refused: at c=8 the schedule served 210.0 tok/s, 30.0% below k=1's 300.0 "
        "tok/s measured at that level (limit 5%); kept the single k=1 (best over the load mix)"
    )
    assert verdict.playbook_fields() == {"num_speculative_tokens": 1, "speculative_schedule": None}
    comment = verdict.playbook_comment("2026-12-05")
    assert comment.startswith("# tune --load 2026-12-05: schedule refused: at c=8")
    assert "\n" not in comment


def test_a_refusal_names_the_latencies_both_sides_measured_at_the_losing_level() -> None:
    decision, runs, fallback = scheduled()
    # the static runs measured TTFT only; the schedule's bench measured both
    static = [
        run.model_copy(update={"median_ttft_ms": 40.0 + run.k, "median_tpot_ms": None})
        for run in runs
    ]
    verify = [
        run.model_copy(update={"median_ttft_ms": 75.0, "median_tpot_ms": 6.25})
        for run in verify_bench(decision, {8: 0.30})
    ]
    verdict = judge_schedule(decision, static, verify, old_k=OLD_K, fallback_k=fallback)
    c8 = next(v for v in verdict.levels if v.level == 8)
    assert (c8.schedule_ttft_ms, c8.best_static_ttft_ms) == (75.0, 41.0)
    assert (c8.schedule_tpot_ms, c8.best_static_tpot_ms) == (6.25, None)
    # TPOT is left out rather than compared with nothing
    assert "measured at that level (limit 5%; median TTFT 75.0 against 41.0 ms); kept" in (
        verdict.sentence
    )
    assert c8.model_dump()["best_static_ttft_ms"] == 41.0


def test_a_loss_just_past_the_limit_refuses() -> None:
    decision, runs, fallback = scheduled()
    loss = MAX_LOSS + 0.001
    verdict = judge_schedule(
        decision, runs, verify_bench(decision, {16: loss}), old_k=OLD_K, fallback_k=fallback
    )
    assert not verdict.accepted and verdict.worst_level == 16


def test_a_level_the_schedule_was_not_benched_at_refuses_it() -> None:
    decision, runs, fallback = scheduled()
    partial = [run for run in verify_bench(decision, {}) if run.level != 32]
    verdict = judge_schedule(decision, runs, partial, old_k=OLD_K, fallback_k=fallback)
    assert not verdict.accepted
    assert verdict.sentence.startswith("schedule refused: not measured at c=32")


def test_one_k_is_not_a_schedule_to_verify() -> None:
    decision, runs, fallback = scheduled()
    single = decision.model_copy(update={"kind": "single_k"})
    with pytest.raises(TuneInputError, match="nothing to verify"):
        judge_schedule(single, runs, [], old_k=OLD_K, fallback_k=fallback)


def test_the_verdict_and_the_model_serialize_into_tune_json() -> None:
    tuner = plan(4)
    _, runs = run_plan(tuner)
    result = tuner.recommend(runs)
    decision = decide(result, VLLM, 64)
    verify = verify_bench(decision, {})
    assert result.single_k is not None
    verdict = judge_schedule(decision, runs, verify, old_k=OLD_K, fallback_k=result.single_k.k)
    section = json.loads(
        json.dumps(load_section(result, decision, runs, verify_runs=verify, verdict=verdict))
    )
    assert section["mode"] == "load" and section["levels"] == list(LEVELS)
    assert section["k_by_level"] == {"1": 4, "2": 3, "4": 2, "8": 1, "16": 1, "32": 0}
    assert section["stops_paying_at"] == 32
    assert section["decision"]["schedule"] == decision.schedule.as_vllm()
    assert section["verdict"]["accepted"] is True
    assert section["verdict"]["schedule"] == decision.schedule.as_vllm()
    assert len(section["runs"]) == len(runs) and len(section["verify"]) == len(LEVELS)
    rows = [row for row in section["predictions"] if row["level"] == 32 and row["k"] == 0]
    assert rows[0]["measured_tok_s"] == pytest.approx(32 / cpu_step(32, 0))
    assert section["step_cost"]["smooth"].startswith("t(B, x) = 16.000 ms")
