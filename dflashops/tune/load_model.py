"""Throughput per (concurrency level, k), and k*(level), from the runs of ``tune --load``.

At a level with running batch B, with the level's own acceptance curve (``load_acceptance``)
and step-time fit (``load_cost``):

    T_B(k)    = B · τ_B(k) / t_B(x_B(k))       aggregate output tok/s
    TPOT_B(k) = ρ_B · 1000 · B / T_B(k)        median ms per output token of one request
    T_B(0)    = B / t0_B                       speculation off

τ_B(k) = 1 + Σ_{i<k} r_{B,i}, x_B(k) = Σ_{i<k} q_{B,i} (drafted tokens), ρ_B the level's measured
median TPOT over B/T (1 without one: each of B requests gets T/B tok/s). A (level, k) that was
measured scores its measured tok/s and TPOT: the model fills in what was not measured.

k*(level) maximises the objective: T, or with an SLO the highest T whose TPOT is under it (no
k under it: the lowest TPOT, flagged). The smallest k within ``tolerance`` of the best wins, so
k = 0 wins where speculation gains less than that. The single k for an engine without a schedule
maximises Σ_level w_level·score(level, k) over the load mix: the tok/s a server spending a share
w of its time at each level serves (within the SLO, with one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from dflashops.errors import TuneInputError
from dflashops.tune.acceptance import AcceptanceCurve
from dflashops.tune.load_acceptance import (
    AcceptanceCheck,
    check_acceptance,
    level_curves,
    pooled_curve,
)
from dflashops.tune.load_cost import LevelCost, LoadCostModel, fit_load_costs
from dflashops.tune.load_runs import LevelRun, by_level, mean_tok_s
from dflashops.tune.load_scores import LevelChoice, LevelPrediction, SingleK, single_k
from dflashops.tune.load_settings import LoadSettings
from dflashops.tune.model import choose_k
from dflashops.tune.stepcost import LINEAR_TOLERANCE


class LoadResult(BaseModel):
    """k*(level), the single k for the mix, and the evidence behind them."""

    model_config = ConfigDict(frozen=True)

    settings: LoadSettings
    levels: tuple[LevelChoice, ...]
    k_by_level: dict[int, int]
    acceptance_check: AcceptanceCheck
    costs: LoadCostModel
    single_k: SingleK | None
    measured_single_k: SingleK | None = Field(
        default=None,
        description="the same choice among the k launched (measured at every weighted level): "
        "what a refused schedule keeps, since the model it came from was just contradicted",
    )
    stops_paying_at: int | None = Field(
        description="the lowest level from which on speculation off (k = 0) wins every level"
    )
    warnings: tuple[str, ...]
    assumptions: tuple[str, ...]

    def choice(self, level: int) -> LevelChoice:
        return next(item for item in self.levels if item.level == level)

    def score(self, level: int, k: int) -> float | None:
        row = self.choice(level).prediction(k)
        return None if row is None else row.tok_s


def analyse_load(runs: Sequence[LevelRun], settings: LoadSettings) -> LoadResult:
    """Fit the per-level model to the runs and choose k per level and for the mix."""
    wanted = set(settings.levels)
    runs = [run for run in runs if run.level in wanted]
    missing = sorted(wanted - {run.level for run in runs})
    if missing:
        raise TuneInputError(
            f"no run at level(s) {missing}: every level needs at least one measured k",
            field="load",
        )
    curves = level_curves(runs, settings.extrapolation)
    pooled = pooled_curve(runs, settings.extrapolation)
    costs = fit_load_costs(runs, curves, pooled, settings.fit)
    grouped = by_level(runs)
    choices = tuple(
        _choose(
            level,
            grouped[level],
            own=curves.get(level),
            pooled=pooled,
            costs=costs,
            settings=settings,
        )
        for level in settings.levels
    )
    k_by_level = {choice.level: choice.best_k for choice in choices}
    check = check_acceptance(runs)
    return LoadResult(
        settings=settings,
        levels=choices,
        k_by_level=k_by_level,
        acceptance_check=check,
        costs=costs,
        single_k=single_k(choices, settings),
        measured_single_k=single_k(choices, settings, measured_only=True),
        stops_paying_at=_stops_paying_at(k_by_level),
        warnings=tuple(_warnings(choices, check, costs, settings)),
        assumptions=_assumptions(costs, settings),
    )


def _choose(
    level: int,
    runs: Sequence[LevelRun],
    *,
    own: AcceptanceCurve | None,
    pooled: AcceptanceCurve | None,
    costs: LoadCostModel,
    settings: LoadSettings,
) -> LevelChoice:
    cost = costs.level(level)
    curve = own or pooled
    source = "this level" if own is not None else "pooled over levels" if pooled else "none"
    ratio = _tpot_ratio(runs)
    measured_ks = sorted({run.k for run in runs})
    rows = [
        row
        for k in sorted({*settings.candidates(), *measured_ks})
        if (row := _predict(k, runs, _Level(curve, cost, costs, ratio, settings))) is not None
    ]
    in_range = [row for row in rows if row.k == 0 or settings.k_min <= row.k <= settings.k_max]
    if not in_range:
        raise TuneInputError(
            f"level c={level}: no k in 0 and {settings.k_min}..{settings.k_max} was measured "
            "or can be predicted",
            field="load",
        )
    best_k, notes = _best(in_range, settings, level)
    measured = {row.k: row.measured_tok_s for row in in_range if row.measured_tok_s is not None}
    if own is None and pooled is not None:
        notes.append(f"c={level}: no acceptance measured here; the curve pooled over levels")
    return LevelChoice(
        level=level,
        batch=cost.batch,
        best_k=best_k,
        best_tok_s=next(row.tok_s for row in in_range if row.k == best_k),
        best_measured_k=choose_k(measured, settings.tolerance) if measured else None,
        predictions=tuple(rows),
        acceptance=curve,
        acceptance_source=source,
        cost=cost,
        tpot_ratio=ratio,
        notes=tuple(notes),
    )


@dataclass(frozen=True)
class _Level:
    """What predicting any k at one level needs."""

    curve: AcceptanceCurve | None
    cost: LevelCost
    costs: LoadCostModel
    tpot_ratio: float
    settings: LoadSettings


def _predict(k: int, runs: Sequence[LevelRun], at: _Level) -> LevelPrediction | None:
    """k at this level: the model's numbers, and the measured ones where k ran here."""
    curve, cost, costs, ratio, settings = at.curve, at.cost, at.costs, at.tpot_ratio, at.settings
    at_k = [run for run in runs if run.k == k]
    measured = mean_tok_s(at_k, cost.level, k)
    tpots = [run.median_tpot_ms for run in at_k if run.median_tpot_ms is not None]
    if k == 0:
        tokens, drafted, extrapolated_acceptance = 1.0, 0.0, False
        seconds = cost.plain_step_s
        cost_extrapolated = seconds is None
        seconds = seconds if seconds is not None else costs.plain_seconds(cost.batch)
    elif curve is not None:
        tokens, drafted = curve.tokens_per_step(k), curve.drafted_tokens(k)
        extrapolated_acceptance = k > curve.measured_positions
        seconds = cost.seconds(drafted)
        cost_extrapolated = seconds is None or cost.extrapolates(drafted)
        seconds = seconds if seconds is not None else costs.spec_seconds(cost.batch, drafted)
    else:
        own = [t for run in at_k if (t := run.own_tokens_per_step()) is not None]
        tokens, drafted, extrapolated_acceptance = (
            sum(own) / len(own) if own else 1.0,
            float(k),
            False,
        )
        seconds, cost_extrapolated = None, False
    predicted = cost.batch * tokens / seconds if seconds and seconds > 0 else None
    tok_s = measured if measured is not None else predicted
    if tok_s is None:
        return None
    tpot = sum(tpots) / len(tpots) if tpots else ratio * 1000.0 * cost.batch / tok_s
    slo = settings.tpot_slo_ms
    return LevelPrediction(
        k=k,
        tokens_per_step=tokens,
        drafted_tokens=drafted,
        step_time_s=seconds,
        predicted_tok_s=predicted,
        measured_tok_s=measured,
        tok_s=tok_s,
        tpot_ms=tpot,
        meets_slo=None if slo is None else tpot <= slo,
        acceptance_extrapolated=extrapolated_acceptance,
        cost_extrapolated=cost_extrapolated and measured is None,
    )


def _best(
    rows: Sequence[LevelPrediction], settings: LoadSettings, level: int
) -> tuple[int, list[str]]:
    notes: list[str] = []
    scores = {row.k: row.tok_s for row in rows}
    if settings.tpot_slo_ms is None:
        return choose_k(scores, settings.tolerance), notes
    feasible = {row.k: row.tok_s for row in rows if row.meets_slo}
    if feasible:
        return choose_k(feasible, settings.tolerance), notes
    fastest = min(rows, key=lambda row: (row.tpot_ms or float("inf"), row.k))
    notes.append(
        f"c={level}: no k keeps median TPOT under {settings.tpot_slo_ms:g} ms (lowest: "
        f"k={fastest.k} at {fastest.tpot_ms:.1f} ms); k*={fastest.k}, the lowest TPOT"
    )
    return fastest.k, notes


def _tpot_ratio(runs: Sequence[LevelRun]) -> float:
    ratios = [
        run.median_tpot_ms / (1000.0 * run.batch / run.output_tok_s)
        for run in runs
        if run.median_tpot_ms is not None
    ]
    return sum(ratios) / len(ratios) if ratios else 1.0


def _stops_paying_at(k_by_level: dict[int, int]) -> int | None:
    off: int | None = None
    for level in sorted(k_by_level, reverse=True):
        if k_by_level[level] != 0:
            break
        off = level
    return off


def _warnings(
    choices: Sequence[LevelChoice],
    check: AcceptanceCheck,
    costs: LoadCostModel,
    settings: LoadSettings,
) -> list[str]:
    out: list[str] = list(costs.notes)
    if check.moves:
        out.append(check.finding)
    for choice in choices:
        out.extend(choice.notes)
        best = choice.prediction(choice.best_k)
        if best is not None and best.measured_tok_s is None:
            out.append(
                f"c={choice.level}: k*={choice.best_k} was not measured (predicted "
                f"{best.tok_s:.1f} tok/s): measure it to confirm"
            )
        if choice.best_k == settings.k_max:
            out.append(f"c={choice.level}: k* is the largest k allowed ({settings.k_max})")
        fit = choice.cost.fit
        if fit is not None:
            out.extend(f"c={choice.level}: {note}" for note in fit.notes)
    cross = costs.cross
    if cross is not None and cross.max_relative_residual > LINEAR_TOLERANCE:
        out.append(
            f"the smooth model {cross.equation()} misses a measured step by "
            f"{cross.max_relative_residual:.1%}: between levels the step time is interpolated "
            "from the levels' own fits"
        )
    return out


def _assumptions(costs: LoadCostModel, settings: LoadSettings) -> tuple[str, ...]:
    smooth = (
        f"across levels the step time is summarised by {costs.cross.equation()} "
        f"(non-negative least squares, worst miss {costs.cross.max_relative_residual:.1%})"
        if costs.cross is not None
        else "the steps measured span one batch or one x only: no smooth model across levels"
    )
    return (
        "a step's effective time at running batch B is B·τ/T (T: the level's aggregate output "
        "tok/s; τ: tokens per verify step, 1 without speculation): prefill and gaps included",
        "each level keeps its own per-position acceptance (merged over the k measured there); "
        "a level without one uses the curve pooled over every level",
        "at each level the step time t(x) is fitted over the k measured there (x = drafted "
        "tokens per sequence), as at concurrency 1; between levels it is linear in the batch",
        smooth,
        "median TPOT is predicted as ρ·1000·B/T, ρ the level's measured median over 1000·B/T",
        "a (level, k) that was measured scores its measured tok/s and TPOT",
        f"k*(level) maximises {settings.objective}; the smallest k within "
        f"{settings.tolerance:.0%} of the best wins (k = 0, speculation off, included)",
    )
