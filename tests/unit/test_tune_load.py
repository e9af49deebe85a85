"""``tune --load``'s model: step costs per (batch, k), acceptance per level, k*(level), the
single k for a load mix, and the playbook's ``tune.load`` fields.

Two canned machines at levels 1..32, built from the step costs the concurrency-1 tests already
hold (``test_stepcost_gpu_numbers``): a GPU whose verify step stays flat in k (the H200 numbers)
until the batch's tokens pass its compute ridge, and a CPU whose every verified token costs work
(the growing costs), where speculation stops paying once the batch is large.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import pytest
from pydantic import ValidationError

from dflashops.errors import TuneInputError
from dflashops.playbook.models import Tune
from dflashops.tune.acceptance import AcceptanceCurve, acceptance_curve
from dflashops.tune.load_model import LoadResult, analyse_load
from dflashops.tune.load_runs import LevelRun, level_runs_from_report
from dflashops.tune.load_settings import LoadSettings
from tests.support.reports import bench_report, level_result
from tests.unit.test_stepcost_gpu_numbers import (
    GROWING_S,
    H200_PLAIN_STEP_S,
    H200_REPORTED,
    H200_STEP_S,
)
from tests.unit.test_tune_model import REFERENCE

LEVELS = (1, 2, 4, 8, 16, 32)
StepCost = Callable[[int, int], float]


def cpu_step(batch: int, k: int) -> float:
    """Seconds per step on the CPU-like machine: every token of the batch costs 2 ms.

    At batch 1 it is GROWING_S (18 ms + 2 ms per draft token); plain decode is 13 ms + 2 ms·B.
    """
    if k == 0:
        return 0.013 + 0.002 * batch
    return 0.016 + 0.002 * batch * (1 + k)


def gpu_step(batch: int, k: int) -> float:
    """Seconds per step on the GPU-like machine: the H200's flat steps at batch 1, 0.4 % more
    per extra sequence, and 0.02 ms per token past 256 tokens a step (the compute ridge)."""
    grow = 1 + 0.004 * (batch - 1)
    if k == 0:
        return H200_PLAIN_STEP_S * grow
    return H200_STEP_S[k] * grow + 0.00002 * max(0, batch * (1 + k) - 256)


def bench(
    step: StepCost,
    curve: AcceptanceCurve,
    k: int,
    levels: Sequence[int] = LEVELS,
    *,
    curves: dict[int, AcceptanceCurve] | None = None,
    drafts: int = 1000,
) -> list[LevelRun]:
    """One launch at ``k``: every level measured as the machine and the curve say."""
    out: list[LevelRun] = []
    for level in levels:
        at = (curves or {}).get(level, curve)
        tokens = at.tokens_per_step(k)
        out.append(
            LevelRun(
                level=level,
                k=k,
                output_tok_s=level * tokens / step(level, k),
                median_tpot_ms=1000.0 * step(level, k) / tokens,
                acceptance=tuple(at.rate(i) for i in range(k)) if k else None,
                acceptance_length=tokens if k else None,
                num_drafts=drafts if k else None,
            )
        )
    return out


def sweep(step: StepCost, curve: AcceptanceCurve, ks: Sequence[int], **kw: object) -> LoadResult:
    runs = [run for k in ks for run in bench(step, curve, k)]
    return analyse_load(runs, LoadSettings.model_validate({"levels": LEVELS, **kw}))


CPU_CURVE = acceptance_curve(REFERENCE)
GPU_CURVE = acceptance_curve(H200_REPORTED)


# --- step costs ------------------------------------------------------------------------------


def test_growing_cpu_costs_fit_every_level_and_the_smooth_model_recovers_them() -> None:
    result = sweep(cpu_step, CPU_CURVE, (0, 1, 4, 8), tolerance=0)
    for choice in result.levels:
        fit = choice.cost.fit
        assert fit is not None and fit.kind == "linear"
        # at batch 1 it is the concurrency-1 tests' growing line: 18 ms + 2 ms per draft token
        assert fit.slope_s_per_token == pytest.approx(0.002 * choice.level)
        assert fit.intercept_s == pytest.approx(0.016 + 0.002 * choice.level)
        assert choice.cost.plain_step_s == pytest.approx(cpu_step(choice.level, 0))
    first = result.choice(1).cost.fit
    assert first is not None
    assert [first.seconds(k) for k in GROWING_S] == pytest.approx(list(GROWING_S.values()))
    cross, plain = result.costs.cross, result.costs.plain
    assert cross is not None and plain is not None
    assert cross.intercept_s == pytest.approx(0.016)
    assert cross.per_sequence_s == pytest.approx(0.002)
    assert cross.per_draft_token_s == pytest.approx(0.0, abs=1e-9)
    assert cross.per_batch_draft_token_s == pytest.approx(0.002)
    assert cross.max_relative_residual < 1e-9
    assert (plain.intercept_s, plain.per_sequence_s) == pytest.approx((0.013, 0.002))
    assert "16.000 ms + 2.000 ms·B + (0.000 ms + 2.000 ms·B)·x" in cross.equation()
    # an unmeasured k is predicted from the level's fit: c=4, k=2
    row = result.choice(4).prediction(2)
    assert row is not None and row.measured_tok_s is None
    assert row.tok_s == pytest.approx(4 * CPU_CURVE.tokens_per_step(2) / cpu_step(4, 2))


def test_flat_gpu_costs_stay_flat_per_level_and_speculation_keeps_paying() -> None:
    result = sweep(gpu_step, GPU_CURVE, (0, 1, 2, 4, 8, 15))
    first = result.choice(1).cost.fit
    assert first is not None and first.kind == "linear"
    assert first.max_relative_residual < 0.01
    assert 0 <= first.slope_s_per_token < 0.002 * first.intercept_s
    # the compute ridge at 256 tokens a step bends the top level's steps: still fitted closely
    top = result.choice(32).cost.fit
    assert top is not None and top.max_relative_residual < 0.02
    # every measured (level, k) is predicted within 1 %
    for choice in result.levels:
        for row in choice.predictions:
            if row.measured_tok_s is not None and row.predicted_tok_s is not None:
                assert row.predicted_tok_s == pytest.approx(row.measured_tok_s, rel=0.01)
    assert result.stops_paying_at is None
    assert all(k >= 6 for k in result.k_by_level.values())
    assert result.k_by_level[32] < result.k_by_level[1]
    # the sweep's best at c=1 was k=15 (517 tok/s); k* is within 1 % of it, not far below
    assert result.choice(1).best_tok_s >= 0.99 * result.score(1, 15)  # type: ignore[operator]
    # one line cannot follow the ridge: said, and the levels' own fits are used instead
    assert any("smooth model" in w and "interpolated" in w for w in result.warnings)


def test_k_star_falls_to_zero_where_the_verify_cost_outgrows_acceptance() -> None:
    result = sweep(cpu_step, CPU_CURVE, (0, 1, 4, 8), tolerance=0)
    assert result.k_by_level == {1: 4, 2: 3, 4: 2, 8: 1, 16: 1, 32: 0}
    assert result.stops_paying_at == 32
    assert result.choice(32).best_tok_s == pytest.approx(32 / cpu_step(32, 0))
    # k*(level) is not measured everywhere: said, so the plan measures it next
    assert any("c=2: k*=3 was not measured" in w for w in result.warnings)
    # the default tolerance (1 %) prefers the smaller k where the gain is that small
    assert sweep(cpu_step, CPU_CURVE, (0, 1, 4, 8)).k_by_level[1] == 3


def test_a_level_measured_at_one_speculative_k_borrows_the_smooth_slope() -> None:
    runs = [
        *[run for k in (0, 1, 4) for run in bench(cpu_step, CPU_CURVE, k, (1, 2, 4))],
        *bench(cpu_step, CPU_CURVE, 1, (8,)),
        *bench(cpu_step, CPU_CURVE, 0, (8,)),
    ]
    result = analyse_load(runs, LoadSettings(levels=(1, 2, 4, 8), tolerance=0))
    cost = result.choice(8).cost
    assert cost.fit is None and cost.anchor_slope_s_per_token == pytest.approx(0.016)
    assert cost.seconds(2) == pytest.approx(cpu_step(8, 2))
    # c=8 measured acceptance at position 0 only: past it, the pooled curve's decay
    curve = result.choice(8).acceptance
    assert curve is not None and "pooled curve's decay" in curve.source
    assert curve.rate(1) == pytest.approx(REFERENCE[1])
    assert result.k_by_level[8] == 1


# --- acceptance under load -------------------------------------------------------------------


def test_acceptance_moving_with_load_is_flagged_with_numbers() -> None:
    busy = acceptance_curve([0.70, 0.45, 0.28, 0.15, 0.06, 0.03, 0.01])
    curves = {8: busy, 16: busy, 32: busy}
    runs = [run for k in (0, 1, 4) for run in bench(cpu_step, CPU_CURVE, k, curves=curves)]
    result = analyse_load(runs, LoadSettings(levels=LEVELS))
    check = result.acceptance_check
    assert check.moves and check.reference_level == 1
    assert re.search(
        r"position 0: 0\.800 at c=1 → 0\.700 at c=8 \(-0\.100, noise ±0\.0\d\d\)", check.finding
    )
    assert check.finding.startswith("acceptance moves with load across c=1..32")
    assert check.finding in result.warnings
    # each level predicts with its own curve, not c=1's
    own = result.choice(16).acceptance
    assert own is not None and own.rates[0] == pytest.approx(0.70)
    row = result.choice(16).prediction(2)
    assert row is not None and row.tokens_per_step == pytest.approx(1.70 + 0.45)


def test_steady_acceptance_is_said_to_hold() -> None:
    result = sweep(cpu_step, CPU_CURVE, (0, 1, 4))
    check = result.acceptance_check
    assert not check.moves
    assert check.finding.startswith("acceptance per position holds across c=1..32")
    assert not any("moves with load" in w for w in result.warnings)


def test_a_move_within_binomial_noise_is_not_a_finding() -> None:
    nudged = acceptance_curve([0.76, 0.55, 0.38, 0.22, 0.09, 0.04, 0.02])
    few = [
        run
        for k in (0, 4)
        for run in bench(cpu_step, CPU_CURVE, k, (1, 4), curves={4: nudged}, drafts=200)
    ]
    check = analyse_load(few, LoadSettings(levels=(1, 4))).acceptance_check
    assert check.largest is not None and check.largest.noise > 0.04
    assert not check.moves
    many = [
        run
        for k in (0, 4)
        for run in bench(cpu_step, CPU_CURVE, k, (1, 4), curves={4: nudged}, drafts=100_000)
    ]
    assert analyse_load(many, LoadSettings(levels=(1, 4))).acceptance_check.moves


# --- objectives ------------------------------------------------------------------------------


def test_tpot_slo_keeps_only_levels_and_k_under_it() -> None:
    # CPU machine: median TPOT = step / τ; at c=32 even k=0 takes 77 ms a token
    result = sweep(cpu_step, CPU_CURVE, (0, 1, 4, 8), tpot_slo_ms=40, tolerance=0)
    c8 = result.choice(8)
    assert all(row.meets_slo == ((row.tpot_ms or 0) <= 40) for row in c8.predictions)
    assert result.k_by_level[8] == 1  # 26.7 ms a token, under 40
    assert result.k_by_level[32] == 0
    assert any("c=32: no k keeps median TPOT under 40 ms" in w for w in result.warnings)
    single = result.single_k
    assert single is not None and single.per_level_tok_s[32] == 0.0
    assert "within the SLO" in single.sentence


def test_the_single_k_follows_the_load_mix() -> None:
    ks = (0, 1, 4, 8)
    quiet = sweep(cpu_step, CPU_CURVE, ks, load_mix={1: 1.0}, tolerance=0)
    assert quiet.single_k is not None and quiet.single_k.k == 4
    busy = sweep(cpu_step, CPU_CURVE, ks, load_mix={32: 3.0, 16: 1.0}, tolerance=0)
    assert busy.single_k is not None and busy.single_k.k == 0
    assert busy.single_k.sentence.startswith("speculation off maximises aggregate output tok/s")
    assert "c=16: 25%, c=32: 75%" in busy.single_k.sentence
    alike = sweep(cpu_step, CPU_CURVE, ks, tolerance=0)
    assert alike.single_k is not None and alike.single_k.k == 1
    weighted = sum(alike.score(level, 1) or 0.0 for level in LEVELS) / len(LEVELS)
    assert alike.single_k.score_tok_s == pytest.approx(weighted)


def test_every_level_needs_a_run() -> None:
    runs = bench(cpu_step, CPU_CURVE, 4, (1, 2))
    with pytest.raises(TuneInputError, match=r"no run at level\(s\) \[4\]"):
        analyse_load(runs, LoadSettings(levels=(1, 2, 4)))


def test_settings_take_the_playbook_section_and_reject_a_bad_mix() -> None:
    tune = Tune(load=[1, 4, 16], load_mix={1: 2.0, 16: 2.0}, tpot_slo_ms=50, k_max=8)
    settings = LoadSettings.from_playbook(tune, k_max=6)
    assert settings.levels == (1, 4, 16) and settings.k_max == 6
    assert settings.weights() == {1: 0.5, 4: 0.0, 16: 0.5}
    assert "median TPOT under 50 ms" in settings.objective
    with pytest.raises(ValidationError, match="not in load"):
        LoadSettings(levels=(1, 2), load_mix={4: 1.0})


# --- the playbook's tune section ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"load": [4, 2]}, "ascending without repeats"),
        ({"load": [1, 1]}, "ascending without repeats"),
        ({"load": []}, "at least one"),
        ({"load": [0, 1]}, "greater than or equal to 1"),
        ({"load_mix": {1: 1.0}}, "set load too"),
        ({"tpot_slo_ms": 30.0}, "set load too"),
        ({"load": [1, 2], "load_mix": {3: 1.0}}, r"level\(s\) \[3\] are not in load"),
        ({"load": [1, 2], "load_mix": {1: 0.0}}, "sum to more than 0"),
        ({"load": [1, 2], "load_mix": {1: -1.0}}, "greater than or equal to 0"),
        ({"load": [1], "tpot_slo_ms": 0}, "greater than 0"),
    ],
)
def test_playbook_load_fields_are_validated(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Tune.model_validate(fields)


def test_playbook_load_fields_accept_a_sweep() -> None:
    tune = Tune.model_validate({"load": [1, 2, 4, 8, 16], "load_mix": {"1": 0.5, "16": 0.5}})
    assert tune.load == [1, 2, 4, 8, 16]
    assert tune.load_mix == {1: 0.5, 16: 0.5}
    assert Tune().load is None and Tune().tpot_slo_ms is None


# --- bench reports -----------------------------------------------------------------------------


def test_a_bench_report_gives_one_run_per_level() -> None:
    levels = [
        level_result(
            max_concurrency=c,
            output_throughput=100.0 * c,
            median_tpot_ms=12.0,
            spec_decode_num_drafts=400,
            spec_decode_draft_tokens=1600,
            spec_decode_acceptance_length=2.5,
            spec_decode_per_position_acceptance_rates=[0.7, 0.4, 0.25, 0.15, 0.0],
        )
        for c in (4, 1)
    ]
    report = bench_report(levels, method="dflash", num_speculative_tokens=4)
    runs = level_runs_from_report(report, "k4.json", running_batch={4: 3.6})
    assert [(run.level, run.k) for run in runs] == [(1, 4), (4, 4)]
    assert runs[1].acceptance == (0.7, 0.4, 0.25, 0.15)
    assert runs[1].drafted_per_draft == 4.0 and runs[1].batch == 3.6
    assert runs[1].step_seconds() == pytest.approx(3.6 * 2.5 / 400.0)
    plain = bench_report([level_result(max_concurrency=2)], method="none")
    assert [
        (run.level, run.k, run.step_seconds()) for run in level_runs_from_report(plain, "x")
    ] == [(2, 0, 2 / 100.0)]
    cut = bench_report([level_result(incomplete=True)], method="none")
    with pytest.raises(TuneInputError, match="incomplete"):
        level_runs_from_report(cut, "cut.json")


def test_a_run_without_speculation_carries_no_acceptance() -> None:
    with pytest.raises(ValidationError, match="k=0 drafts nothing"):
        LevelRun(level=1, k=0, output_tok_s=10.0, acceptance_length=1.5)
    with pytest.raises(ValidationError, match=r"1\.\.k=2"):
        LevelRun(level=1, k=2, output_tok_s=10.0, acceptance=(0.9, 0.8, 0.7))  # 3 > k
