"""The tuning model: acceptance, step-time fit, predictions and the choice of k."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from dflashops.tune import (
    CostPoint,
    Extrapolation,
    FitMethod,
    TuneInputError,
    TuneInputs,
    TuneRun,
    TuneSettings,
    acceptance_curve,
    analyse,
    choose_k,
    fit_step_cost,
)
from dflashops.tune.acceptance import alpha_from_acceptance_length, geometric_tail_ratio
from dflashops.tune.fitmath import isotonic, least_squares_line
from dflashops.tune.runs import curve_from_runs

REFERENCE = [0.80, 0.574, 0.40, 0.236, 0.1, 0.05, 0.02]
REFERENCE_COSTS = [(1, 0.020), (2, 0.022), (4, 0.026), (8, 0.034), (15, 0.048)]


def step_runs(costs: list[tuple[int, float]]) -> tuple[TuneRun, ...]:
    return tuple(TuneRun(k=k, step_time_s=seconds) for k, seconds in costs)


def run_analysis(
    rates: list[float], costs: list[tuple[int, float]], **settings: object
) -> tuple[int, dict[int, float]]:
    result = analyse(
        TuneInputs(
            runs=step_runs(costs),
            acceptance=acceptance_curve(rates),
            settings=TuneSettings.model_validate(settings),
        )
    )
    return result.best_k, {p.k: p.throughput_tok_s for p in result.predictions}


# --- acceptance ---------------------------------------------------------------------------


def test_tokens_per_step_sums_unconditional_rates() -> None:
    curve = acceptance_curve(REFERENCE)
    assert curve.tokens_per_step(0) == 1.0
    assert curve.tokens_per_step(1) == pytest.approx(1.8)
    assert curve.tokens_per_step(4) == pytest.approx(1 + 0.8 + 0.574 + 0.4 + 0.236)
    assert curve.drafted_tokens(4) == 4.0


def test_conditional_rates_are_multiplied_out() -> None:
    curve = acceptance_curve([0.8, 0.5, 0.5], conditional=True)
    assert curve.rates == pytest.approx((0.8, 0.4, 0.2))
    assert curve.conditional() == pytest.approx([0.8, 0.5, 0.5])
    assert "conditional" in curve.source


def test_rising_unconditional_rates_are_rejected_with_a_hint() -> None:
    with pytest.raises(TuneInputError) as info:
        acceptance_curve([0.8, 0.7, 0.75])
    assert info.value.field == "acceptance"
    assert "--conditional" in (info.value.hint or "")


def test_rounding_wobble_is_smoothed_not_rejected() -> None:
    curve = acceptance_curve([0.8, 0.5, 0.505, 0.3])
    assert curve.rates == pytest.approx((0.8, 0.5025, 0.5025, 0.3))


@pytest.mark.parametrize("bad", [[80.0, 50.0], [-0.1], []])
def test_rates_must_be_fractions(bad: list[float]) -> None:
    with pytest.raises(TuneInputError):
        acceptance_curve(bad)


def test_geometric_tail_uses_the_smaller_of_fit_and_last_conditional() -> None:
    # last conditional 0.02/0.05 = 0.4; the log fit over 0.1, 0.05, 0.02 gives ≈ 0.447
    assert geometric_tail_ratio(REFERENCE) == pytest.approx(0.4)
    curve = acceptance_curve(REFERENCE)
    assert curve.rate(7) == pytest.approx(0.02 * 0.4)
    assert curve.rate(9) == pytest.approx(0.02 * 0.4**3)


def test_single_position_extrapolates_with_constant_alpha() -> None:
    curve = acceptance_curve([0.8])
    assert curve.rate(1) == pytest.approx(0.64)
    assert curve.rate(2) == pytest.approx(0.512)


def test_always_accepted_curve_stays_flat_and_zero_extrapolation_cuts() -> None:
    assert acceptance_curve([1.0, 1.0]).rate(10) == 1.0
    zero = acceptance_curve([1.0, 1.0], extrapolation=Extrapolation.ZERO)
    assert zero.rate(2) == 0.0
    assert zero.tokens_per_step(10) == 3.0


def test_alpha_from_acceptance_length_inverts_the_geometric_sum() -> None:
    assert alpha_from_acceptance_length(1 + 0.5 + 0.25 + 0.125, 3) == pytest.approx(0.5)
    assert alpha_from_acceptance_length(1.0, 3) == 0.0
    assert alpha_from_acceptance_length(4.0, 3) == 1.0


def test_drafted_per_draft_prices_steps_by_what_was_proposed() -> None:
    # n-gram: half the drafts find a match of full length, the other half propose nothing
    curve = acceptance_curve([0.45, 0.4, 0.35], drafted_per_draft=1.5)
    assert curve.draft_fraction == pytest.approx((0.5, 0.5, 0.5))
    assert curve.drafted_tokens(3) == pytest.approx(1.5)
    assert curve.drafted_tokens(10) == pytest.approx(5.0)  # the last share holds past position 3


def test_full_drafts_need_no_fractions() -> None:
    assert acceptance_curve([0.8, 0.5], drafted_per_draft=2.0).draft_fraction == ()


def test_drafted_per_draft_below_accepted_is_inconsistent() -> None:
    with pytest.raises(TuneInputError, match="between the accepted"):
        acceptance_curve([0.9, 0.8], drafted_per_draft=1.0)


def test_per_position_draft_fraction_is_used_and_checked() -> None:
    curve = acceptance_curve([0.5, 0.3], draft_fraction=[0.9, 0.6])
    assert curve.drafted_tokens(4) == pytest.approx(0.9 + 0.6 + 0.6 + 0.6)
    with pytest.raises(TuneInputError, match="exceeds the fraction drafted"):
        acceptance_curve([0.5, 0.3], draft_fraction=[0.4, 0.3])
    with pytest.raises(TuneInputError, match="not both"):
        acceptance_curve([0.5], draft_fraction=[0.9], drafted_per_draft=0.9)


def test_isotonic_pools_violators_with_weights() -> None:
    assert isotonic([1.0, 3.0, 2.0, 4.0], increasing=True) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([0.5, 0.6], [3.0, 1.0], increasing=False) == pytest.approx([0.525, 0.525])
    intercept, slope = least_squares_line([1, 2, 3], [2, 4, 6])
    assert (intercept, slope) == pytest.approx((0.0, 2.0))


# --- step-time fit ---------------------------------------------------------------------------


def points(costs: list[tuple[int, float]]) -> list[CostPoint]:
    return [CostPoint(k=k, drafted_tokens=k, seconds=s) for k, s in costs]


def test_linear_fit_recovers_line_and_reports_residuals() -> None:
    fit = fit_step_cost(points(REFERENCE_COSTS))
    assert fit.kind == "linear"
    assert fit.intercept_s == pytest.approx(0.018)
    assert fit.slope_s_per_token == pytest.approx(0.002)
    assert fit.rmse_s == pytest.approx(0.0, abs=1e-12)
    assert [p.k for p in fit.points] == [1, 2, 4, 8, 15]
    assert fit.seconds(6) == pytest.approx(0.030)


def test_noisy_points_keep_the_line_and_show_residuals() -> None:
    fit = fit_step_cost(points([(1, 0.0204), (4, 0.0255), (8, 0.0345), (15, 0.0478)]))
    assert fit.kind == "linear"
    assert 0 < fit.max_relative_residual < 0.05
    assert all(p.residual_s == pytest.approx(p.seconds - p.fitted_s) for p in fit.points)


def test_step_that_breaks_the_line_switches_to_monotone_interpolation() -> None:
    # a CUDA-graph bucket: +8 ms from k=8 on
    costs = [(1, 0.020), (2, 0.021), (4, 0.023), (8, 0.035), (12, 0.039)]
    fit = fit_step_cost(points(costs))
    assert fit.kind == "monotone"
    assert any("monotonically" in note for note in fit.notes)
    for k, seconds in costs:
        assert fit.seconds(k) == pytest.approx(seconds)
    assert fit.seconds(6) == pytest.approx(0.029)
    # past the end: the steeper of end segment (1 ms) and least squares (≈1.7 ms)
    assert fit.seconds(15) > 0.039 + 3 * 0.001
    assert fit_step_cost(points(costs), FitMethod.LINEAR).kind == "linear"


def test_falling_step_time_clamps_the_slope() -> None:
    fit = fit_step_cost(points([(1, 0.021), (4, 0.020)]))
    assert fit.slope_s_per_token == 0.0
    assert fit.intercept_s == pytest.approx(0.0205)
    assert "clamped" in fit.notes[0]


def test_one_k_cannot_be_fitted() -> None:
    with pytest.raises(TuneInputError, match="only one k"):
        fit_step_cost(points([(4, 0.02), (4, 0.021)]))
    with pytest.raises(TuneInputError, match="no step times"):
        fit_step_cost([])


# --- choice of k ---------------------------------------------------------------------------


def test_choose_k_breaks_ties_towards_smaller_k() -> None:
    assert choose_k({1: 10.0, 2: 12.0, 3: 12.0, 4: 11.0}) == 2
    assert choose_k({3: 12.0, 2: 12.0 * (1 - 1e-12)}) == 2
    assert choose_k({1: 10.0, 2: 11.9, 3: 12.0}, tolerance=0.01) == 2
    with pytest.raises(ValueError, match="no k"):
        choose_k({})


def test_reference_curve_recommends_a_small_k() -> None:
    best, throughput = run_analysis(REFERENCE, REFERENCE_COSTS)
    assert 4 <= best <= 6
    assert best == 4
    assert throughput[4] == pytest.approx(3.010 / 0.026)
    assert throughput[15] < 0.6 * throughput[4]


def test_context_curve_from_the_issue_recommends_five_or_six() -> None:
    # the drafter that went from 40 tok/s at k=15 to 61.3 tok/s at k=5-6
    rates = [0.80, 0.53, 0.32, 0.22, 0.15, 0.10, 0.07, 0.05, 0.03, 0.02, 0.01]
    result = analyse(
        TuneInputs(
            runs=(TuneRun(k=15, output_tok_s=40.0), TuneRun(k=6, output_tok_s=61.3)),
            acceptance=acceptance_curve(rates),
        )
    )
    assert result.best_k in range(3, 7)
    assert result.prediction(6).measured_tok_s == 61.3
    assert result.prediction(6).throughput_tok_s == pytest.approx(61.3)


def test_always_accepting_drafter_wants_the_largest_k() -> None:
    best, _ = run_analysis([1.0] * 15, REFERENCE_COSTS)
    assert best == 15


def test_steep_curve_wants_k_one_or_two() -> None:
    best, _ = run_analysis([0.3, 0.05, 0.01], REFERENCE_COSTS)
    assert best in (1, 2)
    best, _ = run_analysis([0.6, 0.4, 0.05], [(1, 0.020), (4, 0.028)])
    assert best == 2


def test_tolerance_prefers_smaller_k_within_it() -> None:
    best, _ = run_analysis(REFERENCE, REFERENCE_COSTS, tolerance=0.01)
    assert best == 3  # 115.6 tok/s is within 1 % of k=4's 115.8


def test_range_limits_the_choice_and_warns_at_the_edge() -> None:
    result = analyse(
        TuneInputs(
            runs=step_runs(REFERENCE_COSTS),
            acceptance=acceptance_curve([1.0] * 15),
            settings=TuneSettings(k_min=2, k_max=6),
        )
    )
    assert [p.k for p in result.predictions] == [2, 3, 4, 5, 6]
    assert result.best_k == 6
    assert any("largest k allowed" in w for w in result.warnings)


def test_optimum_past_measured_positions_is_flagged() -> None:
    result = analyse(
        TuneInputs(
            runs=step_runs([(1, 0.020), (2, 0.0201)]),
            acceptance=acceptance_curve([0.95, 0.9]),
            settings=TuneSettings(k_max=8),
        )
    )
    best = result.prediction(result.best_k)
    assert best.acceptance_extrapolated and best.cost_extrapolated
    assert any("past the 2 measured" in w for w in result.warnings)
    assert any("outside the measured" in w for w in result.warnings)


def test_settings_reject_inverted_range() -> None:
    with pytest.raises(ValidationError, match="above k_max"):
        TuneSettings(k_min=5, k_max=3)


def test_ngram_drafted_tokens_move_the_optimum_up() -> None:
    rates = [0.45, 0.4, 0.35, 0.3]
    costs = [(1, 0.0205), (4, 0.022)]  # measured while only half the drafts proposed anything
    full = analyse(TuneInputs(runs=step_runs(costs), acceptance=acceptance_curve(rates)))
    half = analyse(
        TuneInputs(runs=step_runs(costs), acceptance=acceptance_curve(rates, drafted_per_draft=2.0))
    )
    assert half.prediction(4).drafted_tokens == pytest.approx(2.0)
    assert half.step_cost.points[1].drafted_tokens == pytest.approx(2.0)
    # with x = k/2 the same step times mean twice the cost per drafted token
    assert half.step_cost.slope_s_per_token == pytest.approx(2 * full.step_cost.slope_s_per_token)
    assert half.prediction(4).step_time_s == pytest.approx(0.022)


# --- runs ----------------------------------------------------------------------------------


def test_runs_merge_position_by_position_weighted_by_drafts() -> None:
    runs = [
        TuneRun(k=3, step_time_s=0.02, acceptance=(0.8, 0.5, 0.3), num_drafts=300),
        TuneRun(k=1, step_time_s=0.018, acceptance=(0.7,), num_drafts=100),
    ]
    curve = curve_from_runs(runs)
    assert curve.rates == pytest.approx((0.775, 0.5, 0.3))
    assert "2 run(s)" in curve.source


def test_run_with_rising_acceptance_names_the_run() -> None:
    with pytest.raises(TuneInputError, match=r"bad\.json#0"):
        curve_from_runs([TuneRun(k=2, acceptance=(0.3, 0.8), label="bad.json#0")])


def test_acceptance_length_alone_gives_a_geometric_curve() -> None:
    curve = curve_from_runs([TuneRun(k=3, acceptance_length=1.875, output_tok_s=50)])
    assert curve.rates == pytest.approx((0.5, 0.25, 0.125), abs=1e-9)
    assert curve.rate(3) == pytest.approx(0.0625)


def test_throughput_runs_become_step_times_via_their_own_acceptance() -> None:
    runs = (
        TuneRun(k=4, output_tok_s=100.0, acceptance=(0.8, 0.6, 0.4, 0.2)),
        TuneRun(k=1, output_tok_s=80.0),
    )
    result = analyse(TuneInputs(runs=runs))
    by_k = {p.k: p for p in result.step_cost.points}
    assert by_k[4].seconds == pytest.approx(3.0 / 100.0)
    assert by_k[1].seconds == pytest.approx(1.8 / 80.0)
    assert result.prediction(4).throughput_tok_s == pytest.approx(100.0)
    assert result.best_measured_k == 4


def test_run_validation() -> None:
    with pytest.raises(ValidationError, match=r"1\.\.k=2"):
        TuneRun(k=2, acceptance=(0.9, 0.8, 0.7))
    with pytest.raises(ValidationError, match="above k \\+ 1"):
        TuneRun(k=2, acceptance_length=3.5)
    with pytest.raises(ValidationError):
        TuneRun(k=2, acceptence=(0.9,))  # type: ignore[call-arg]
    with pytest.raises(TuneInputError, match="no acceptance"):
        analyse(TuneInputs(runs=step_runs(REFERENCE_COSTS)))


def test_result_states_its_assumptions() -> None:
    result = analyse(
        TuneInputs(runs=step_runs(REFERENCE_COSTS), acceptance=acceptance_curve(REFERENCE))
    )
    text = " ".join(result.assumptions)
    assert "unconditional" in text
    assert "0.400 per position" in text
    assert "18.000 ms + 2.000 ms" in text
    assert "smaller k" in text
    assert not math.isnan(result.best_throughput_tok_s)


def test_convex_step_times_with_four_k_get_a_quadratic() -> None:
    costs = [(k, 0.020 + 0.0005 * k + 0.00008 * k * k) for k in (1, 6, 12, 15)]
    fit = fit_step_cost(points(costs))
    assert fit.kind == "quadratic"
    assert fit.curvature_s_per_token2 == pytest.approx(0.00008)
    assert fit.slope_s_per_token == pytest.approx(0.0005)
    assert fit.seconds(10) == pytest.approx(0.020 + 0.005 + 0.008)
    # three k cannot check a three-coefficient curve: auto falls back to interpolation
    assert fit_step_cost(points(costs[:3])).kind == "monotone"
    assert fit_step_cost(points(costs[:3]), FitMethod.QUADRATIC).kind == "quadratic"


def test_quadratic_is_refused_for_concave_step_times() -> None:
    costs = [(1, 0.020), (4, 0.030), (8, 0.034), (15, 0.036)]
    with pytest.raises(TuneInputError, match="convex"):
        fit_step_cost(points(costs), FitMethod.QUADRATIC)
    assert fit_step_cost(points(costs)).kind == "monotone"


def test_result_says_whether_best_k_was_timed() -> None:
    result = analyse(
        TuneInputs(runs=step_runs(REFERENCE_COSTS), acceptance=acceptance_curve(REFERENCE))
    )
    assert result.best_k == 4 and result.best_k_timed
    result = analyse(
        TuneInputs(runs=step_runs(REFERENCE_COSTS[1:]), acceptance=acceptance_curve([0.3]))
    )
    assert result.best_k == 1 and not result.best_k_timed
