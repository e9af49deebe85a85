"""Predicted single-stream throughput for each k, and the k that maximises it.

    throughput(k) = tokens_per_step(k) / t(drafted_tokens(k))

``tokens_per_step`` comes from the acceptance curve (``acceptance.py``), ``t`` from the step-time
fit (``stepcost.py``). ``analyse`` is the one call the offline CLI makes; a live driver calls it
after every launch through ``TunePlan``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dflashops.errors import TuneInputError
from dflashops.roofline.model import RooflineResult, RooflineSpec, roofline
from dflashops.tune.acceptance import AcceptanceCurve, Extrapolation
from dflashops.tune.runs import (
    K_LIMIT,
    TuneRun,
    cost_points,
    curve_from_runs,
    measured_throughput,
)
from dflashops.tune.stepcost import LINEAR_TOLERANCE, FitMethod, StepCostFit, fit_step_cost

# relative difference below which two predictions count as a tie (float noise, not a signal)
TIE_EPSILON = 1e-9


class TuneSettings(BaseModel):
    """The search range and the modelling choices."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    k_min: int = Field(default=1, ge=1, le=K_LIMIT)
    k_max: int = Field(default=15, ge=1, le=K_LIMIT)
    tolerance: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="pick the smallest k within this fraction of the best prediction",
    )
    extrapolation: Extrapolation = Extrapolation.GEOMETRIC
    fit: FitMethod = FitMethod.AUTO

    @model_validator(mode="after")
    def _ordered(self) -> TuneSettings:
        if self.k_min > self.k_max:
            raise ValueError(f"k_min {self.k_min} is above k_max {self.k_max}")
        return self


class TuneInputs(BaseModel):
    """Everything one analysis needs; no server involved."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    runs: tuple[TuneRun, ...] = ()
    acceptance: AcceptanceCurve | None = Field(
        default=None, description="replaces the curve merged from the runs"
    )
    settings: TuneSettings = TuneSettings()
    roofline: RooflineSpec | None = None


class KPrediction(BaseModel):
    """The model's view of one k."""

    model_config = ConfigDict(frozen=True)

    k: int
    tokens_per_step: float = Field(description="1 + Σ_{i<k} r_i")
    drafted_tokens: float = Field(description="Σ_{i<k} q_i")
    step_time_s: float
    throughput_tok_s: float
    relative_to_best: float
    acceptance_extrapolated: bool = Field(description="k is past the measured positions")
    cost_extrapolated: bool = Field(description="outside the measured step times")
    at_floor: bool = Field(
        default=False, description="the fitted step time was below the roofline floor"
    )
    measured_tok_s: float | None = Field(default=None, description="mean of runs at this k")
    ceiling_tok_s: float | None = Field(default=None, description="roofline at this k")


class TuneResult(BaseModel):
    """The recommendation, the predictions behind it and what they assume."""

    model_config = ConfigDict(frozen=True)

    best_k: int
    best_throughput_tok_s: float
    best_k_timed: bool = Field(description="a run measured the step time at best_k itself")
    best_measured_k: int | None = Field(description="the best k among measured runs, if any")
    settings: TuneSettings
    acceptance: AcceptanceCurve
    step_cost: StepCostFit
    predictions: tuple[KPrediction, ...]
    roofline: RooflineResult | None = Field(description="at best_k's acceptance length")
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...]

    def prediction(self, k: int) -> KPrediction:
        for item in self.predictions:
            if item.k == k:
                return item
        raise KeyError(k)


def choose_k(scores: Mapping[int, float], tolerance: float = 0.0) -> int:
    """The k with the highest score; any k within ``tolerance`` (relative) of it ties, and the
    smallest tied k wins (less drafting work, less to lose when acceptance drifts)."""
    if not scores:
        raise ValueError("no k to choose from")
    best = max(scores.values())
    threshold = best * (1.0 - tolerance) - abs(best) * TIE_EPSILON
    return min(k for k, score in scores.items() if score >= threshold)


def predict(
    curve: AcceptanceCurve,
    fit: StepCostFit,
    k_min: int,
    k_max: int,
    *,
    min_step_s: float = 0.0,
) -> list[KPrediction]:
    """Predicted throughput for every k in ``[k_min, k_max]`` (``relative_to_best`` filled in).

    ``min_step_s`` is a physical floor on the step time (the roofline: weights read at full
    bandwidth); a fitted time below it is raised to it and the row marked ``at_floor``.
    """
    rows: list[tuple[int, float, float, float, bool]] = []
    for k in range(k_min, k_max + 1):
        drafted = curve.drafted_tokens(k)
        seconds = fit.seconds(drafted)
        if seconds <= 0 and min_step_s <= 0:
            raise TuneInputError(
                f"the step-time fit gives {seconds:.4g} s at k={k}: the measured step times do "
                "not extend that far",
                field="step-cost",
                hint=f"measure a step time near k={k}, or narrow --k-min/--k-max",
            )
        at_floor = seconds < min_step_s
        rows.append((k, curve.tokens_per_step(k), drafted, max(seconds, min_step_s), at_floor))
    best = max(tokens / seconds for _, tokens, _, seconds, _ in rows)
    return [
        KPrediction(
            k=k,
            tokens_per_step=tokens,
            drafted_tokens=drafted,
            step_time_s=seconds,
            throughput_tok_s=tokens / seconds,
            relative_to_best=tokens / seconds / best,
            acceptance_extrapolated=k > curve.measured_positions,
            cost_extrapolated=fit.extrapolates(drafted),
            at_floor=at_floor,
            ceiling_tok_s=tokens / min_step_s if min_step_s > 0 else None,
        )
        for k, tokens, drafted, seconds, at_floor in rows
    ]


def analyse(inputs: TuneInputs) -> TuneResult:
    """Fit the model to the inputs and recommend k."""
    settings = inputs.settings
    curve = inputs.acceptance or curve_from_runs(inputs.runs, settings.extrapolation)
    fit = fit_step_cost(cost_points(inputs.runs, curve), settings.fit)
    measured = _measured_by_k(inputs.runs)
    # the roofline's time to stream the weights once is a floor under every step time
    ceiling = None if inputs.roofline is None else roofline(inputs.roofline).ceiling_tok_s
    if ceiling is not None and not (ceiling > 0 and math.isfinite(1.0 / ceiling)):
        # a bandwidth of 1e-300 GB/s or weights of 1e30 bytes: no step time follows from them
        raise TuneInputError(
            f"the roofline gives {ceiling:.3g} tok/s: bandwidth, tp and weights do not fit "
            "together",
            field="bandwidth-gbps",
        )
    floor_s = 0.0 if ceiling is None else 1.0 / ceiling
    predictions = [
        row.model_copy(update={"measured_tok_s": measured.get(row.k)})
        for row in predict(curve, fit, settings.k_min, settings.k_max, min_step_s=floor_s)
    ]
    best_k = choose_k({p.k: p.throughput_tok_s for p in predictions}, settings.tolerance)
    roof = None
    if inputs.roofline is not None:
        roof = roofline(
            inputs.roofline,
            acceptance_length=curve.tokens_per_step(best_k),
            measured_tok_s=measured.get(best_k),
        )
    best = predictions[best_k - settings.k_min]
    return TuneResult(
        best_k=best_k,
        best_throughput_tok_s=best.throughput_tok_s,
        best_k_timed=any(point.k == best_k for point in fit.points),
        best_measured_k=choose_k(measured, settings.tolerance) if measured else None,
        settings=settings,
        acceptance=curve,
        step_cost=fit,
        predictions=tuple(predictions),
        roofline=roof,
        assumptions=assumptions(curve, fit, floor_s),
        warnings=(*fit.notes, *_warnings(best, curve, fit, settings, predictions, floor_s=floor_s)),
    )


def assumptions(curve: AcceptanceCurve, fit: StepCostFit, floor_s: float = 0.0) -> tuple[str, ...]:
    """The model's assumptions, worded for this curve and fit (shown with every result)."""
    measured = curve.measured_positions
    if curve.extrapolation is Extrapolation.ZERO:
        tail = f"acceptance past the {measured} measured position(s) is taken as 0"
    else:
        tail = (
            f"acceptance past the {measured} measured position(s) decays geometrically by "
            f"{curve.tail_ratio:.3f} per position (the smaller of the last conditional rate and "
            "the least-squares decay over the last 3 positions)"
        )
    if fit.kind == "linear":
        cost = (
            f"t(x) = {fit.intercept_s * 1e3:.3f} ms + {fit.slope_s_per_token * 1e3:.3f} ms × x "
            "(least squares)"
        )
    elif fit.kind == "quadratic":
        cost = (
            f"t(x) = {fit.intercept_s * 1e3:.3f} ms + {fit.slope_s_per_token * 1e3:.3f} ms × x + "
            f"{fit.curvature_s_per_token2 * 1e3:.4f} ms × x² (least squares, convex)"
        )
    else:
        cost = (
            "t(x) interpolated monotonically through the measured points, extrapolated with "
            "the more pessimistic of end segment and least-squares slope"
        )
    drafted = (
        "every position is drafted (x = k)"
        if not curve.draft_fraction
        else "drafts propose fewer than k tokens: x = Σ_{i<k} q_i, q_i from the drafted-token "
        "counts, the last q_i holding for later positions"
    )
    floor = (
        f"; never below {floor_s * 1e3:.2f} ms, the time to stream the weights once (roofline)"
        if floor_s > 0
        else ""
    )
    return (
        "r_i is the unconditional probability that draft positions 0..i were all accepted "
        "(vLLM's per-position rate: accepted at position i / drafts); a verify step emits "
        "1 + Σ_{i<k} r_i tokens on average",
        "r_i does not depend on k; runs at different k are merged position by position",
        tail,
        f"a verify step that checks x draft tokens takes {cost}; {drafted}{floor}",
        "throughput is single-stream decode (batch 1): tokens per step / step time, "
        "prefill and queueing excluded",
        "k* maximises predicted throughput; ties (within the tolerance) go to the smaller k",
    )


def _measured_by_k(runs: Sequence[TuneRun]) -> dict[int, float]:
    seen: dict[int, list[float]] = {}
    for run in runs:
        value = measured_throughput(run)
        if value is not None:
            seen.setdefault(run.k, []).append(value)
    return {k: sum(values) / len(values) for k, values in seen.items()}


def _warnings(
    best: KPrediction,
    curve: AcceptanceCurve,
    fit: StepCostFit,
    settings: TuneSettings,
    rows: Sequence[KPrediction],
    *,
    floor_s: float,
) -> list[str]:
    out: list[str] = []
    if best.acceptance_extrapolated:
        out.append(
            f"k*={best.k} lies past the {curve.measured_positions} measured acceptance "
            f"position(s): measure at k={best.k} to confirm"
        )
    if best.cost_extrapolated:
        low, high = fit.drafted_range
        out.append(
            f"k*={best.k} needs step times outside the measured {low:g}..{high:g} draft "
            f"tokens: measure at k={best.k} to confirm"
        )
    if best.k == settings.k_max and settings.k_max < K_LIMIT:
        out.append(f"k* is the largest k allowed ({settings.k_max}); a larger k may do better")
    if fit.kind != "monotone" and fit.max_relative_residual > LINEAR_TOLERANCE:
        out.append(
            f"the {fit.kind} step-time fit misses a measured point by "
            f"{fit.max_relative_residual:.1%}"
        )
    floored = [row.k for row in rows if row.at_floor]
    if floored:
        out.append(
            f"the fitted step time at k={_ranges(floored)} is below the {floor_s * 1e3:.2f} ms "
            "it takes to stream the weights once: raised to it (step times, weights, tp or GPU "
            "may not fit together)"
        )
    for row in rows:
        if (
            row.ceiling_tok_s is not None
            and row.measured_tok_s is not None
            and row.measured_tok_s > row.ceiling_tok_s
        ):
            out.append(
                f"k={row.k}: measured {row.measured_tok_s:.1f} tok/s is above the bandwidth "
                f"ceiling {row.ceiling_tok_s:.1f} tok/s: likely a measurement error"
            )
    return out


def _ranges(ks: Sequence[int]) -> str:
    """``1,2,3,5`` → ``1-3,5``."""
    parts: list[str] = []
    start = previous = ks[0]
    for k in [*ks[1:], None]:
        if k is not None and k == previous + 1:
            previous = k
            continue
        parts.append(str(start) if start == previous else f"{start}-{previous}")
        if k is not None:
            start = previous = k
    return ",".join(parts)
