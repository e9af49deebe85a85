"""Time of one verify step as a function of the draft tokens it checks, fitted to measurements.

A step is one drafter pass plus one target forward over 1 + drafted tokens. At batch 1 the target
forward is bound by reading the weights, so the step time grows slowly and about linearly with
the tokens checked: t = a + b·x, x = drafted tokens per step (= k when the drafter always drafts k).

``auto`` keeps that least-squares line unless the measurements refute it:

- with 4+ measured k and a point missed by more than ``CURVATURE_TRIGGER`` (2 %, about run-to-run
  noise), a convex quadratic a + b·x + c·x² (b ≥ 0, c > 0) is used if it fits within 5 %
  (attention over more tokens, a drafter that loops per token);
- otherwise, with 3+ measured k and a point missed by more than ``LINEAR_TOLERANCE`` (5 %:
  CUDA-graph buckets), the measured points are interpolated monotonically, extrapolated past both
  ends with the more pessimistic of the end segment's slope and the line's.

A step between two measured k that the points do not show (a bucket boundary) cannot be seen by
any of these; the live planner measures the predicted optimum to catch what it can.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from enum import StrEnum
from itertools import pairwise
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from dflashops.errors import TuneInputError
from dflashops.tune.fitmath import isotonic, least_squares_line, least_squares_quadratic

# auto: a line that misses a point by more than this is not the right shape
LINEAR_TOLERANCE = 0.05
# auto: try a convex quadratic once a line misses by this much (about the run-to-run noise) ...
CURVATURE_TRIGGER = 0.02
# ... and only with one measured k more than it has coefficients, so the data can refute it
QUADRATIC_MIN_K = 4


class FitMethod(StrEnum):
    AUTO = "auto"
    LINEAR = "linear"
    QUADRATIC = "quadratic"
    MONOTONE = "monotone"


class CostPoint(BaseModel):
    """One measured step time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    k: int = Field(ge=1)
    drafted_tokens: float = Field(ge=0, description="draft tokens per step at this k")
    seconds: float = Field(gt=0)


class FitPoint(CostPoint):
    """A measured step time next to the fitted one."""

    fitted_s: float
    residual_s: float = Field(description="measured − fitted")
    relative_residual: float = Field(description="residual / fitted")


class StepCostFit(BaseModel):
    """t(x): seconds per verify step for x draft tokens, with the evidence behind it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["linear", "quadratic", "monotone"]
    intercept_s: float = Field(
        description="a: seconds at 0 draft tokens (monotone: of the least-squares line)"
    )
    slope_s_per_token: float = Field(
        ge=0, description="b: seconds per draft token (monotone: of the least-squares line)"
    )
    curvature_s_per_token2: float = Field(
        default=0.0, ge=0, description="quadratic: t = a + b·x + c·x², this is c"
    )
    knots: tuple[tuple[float, float], ...] = Field(
        default=(), description="monotone: (drafted tokens, seconds) after pooling violators"
    )
    left_slope: float = Field(default=0.0, ge=0, description="monotone: slope below the knots")
    right_slope: float = Field(default=0.0, ge=0, description="monotone: slope above the knots")
    points: tuple[FitPoint, ...]
    rmse_s: float
    max_relative_residual: float
    notes: tuple[str, ...] = ()

    @property
    def drafted_range(self) -> tuple[float, float]:
        xs = [p.drafted_tokens for p in self.points]
        return min(xs), max(xs)

    def seconds(self, drafted_tokens: float) -> float:
        if self.kind != "monotone":
            x = drafted_tokens
            return self.intercept_s + x * (self.slope_s_per_token + self.curvature_s_per_token2 * x)
        return _interpolate(self.knots, self.left_slope, self.right_slope, drafted_tokens)

    def extrapolates(self, drafted_tokens: float) -> bool:
        low, high = self.drafted_range
        return not low - 1e-9 <= drafted_tokens <= high + 1e-9


def fit_step_cost(points: Sequence[CostPoint], method: FitMethod = FitMethod.AUTO) -> StepCostFit:
    """Fit t(x) to measured step times (see the module docstring for the choice of model)."""
    if not points:
        raise TuneInputError(
            "no step times: give --step-cost K:SECONDS or --throughput K:TOK_S",
            field="step-cost",
        )
    distinct = len({p.drafted_tokens for p in points})
    if distinct < 2:
        raise TuneInputError(
            f"step time measured at only one k ({points[0].k}): the cost of a draft token "
            "needs step times at two or more k",
            field="step-cost",
            hint="measure a small k too, e.g. --step-cost 1:SECONDS",
        )
    linear = _linear(points)
    if method is FitMethod.LINEAR:
        return linear
    if method is FitMethod.MONOTONE:
        return _monotone(points, linear, ())
    if method is FitMethod.QUADRATIC:
        quadratic = _quadratic(points, linear) if distinct >= 3 else None
        if quadratic is None:
            raise TuneInputError(
                "no convex, non-decreasing quadratic fits these step times (it needs 3+ k)",
                field="fit",
            )
        return quadratic
    miss = linear.max_relative_residual
    if miss > CURVATURE_TRIGGER and distinct >= QUADRATIC_MIN_K:
        quadratic = _quadratic(points, linear)
        if quadratic is not None and quadratic.max_relative_residual <= LINEAR_TOLERANCE:
            return quadratic
    if miss <= LINEAR_TOLERANCE or distinct < 3:
        return linear
    note = (
        f"a line misses a point by {miss:.1%} (> {LINEAR_TOLERANCE:.0%}): "
        "interpolating the measured points monotonically"
    )
    return _monotone(points, linear, (note,))


def _linear(points: Sequence[CostPoint]) -> StepCostFit:
    xs = [p.drafted_tokens for p in points]
    ts = [p.seconds for p in points]
    notes: tuple[str, ...] = ()
    intercept, slope = least_squares_line(xs, ts)
    if slope < 0:
        notes = (
            f"step time fell as k grew (least-squares slope {slope:.3g} s/token, noise?): "
            "slope clamped to 0",
        )
        intercept, slope = sum(ts) / len(ts), 0.0
    res = _residuals(points, lambda x: intercept + slope * x)
    return StepCostFit(
        kind="linear",
        intercept_s=intercept,
        slope_s_per_token=slope,
        points=res.points,
        rmse_s=res.rmse_s,
        max_relative_residual=res.worst,
        notes=notes,
    )


def _monotone(
    points: Sequence[CostPoint], linear: StepCostFit, notes: tuple[str, ...]
) -> StepCostFit:
    knots = _monotone_knots([p.drafted_tokens for p in points], [p.seconds for p in points])
    segment_slopes = [(t1 - t0) / (x1 - x0) for (x0, t0), (x1, t1) in pairwise(knots)]
    # past the ends, the more pessimistic of end segment and line: steeper up, shallower down
    left = max(0.0, min(segment_slopes[0], linear.slope_s_per_token))
    right = max(segment_slopes[-1], linear.slope_s_per_token)
    res = _residuals(points, lambda x: _interpolate(knots, left, right, x))
    return StepCostFit(
        kind="monotone",
        intercept_s=linear.intercept_s,
        slope_s_per_token=linear.slope_s_per_token,
        knots=tuple(knots),
        left_slope=left,
        right_slope=right,
        points=res.points,
        rmse_s=res.rmse_s,
        max_relative_residual=res.worst,
        notes=(*linear.notes, *notes),
    )


def _quadratic(points: Sequence[CostPoint], linear: StepCostFit) -> StepCostFit | None:
    """Least-squares t = a + b·x + c·x², convex and non-decreasing from 0 (b ≥ 0, c > 0)."""
    xs = [p.drafted_tokens for p in points]
    ts = [p.seconds for p in points]
    a, b, c = least_squares_quadratic(xs, ts)
    if b < 0:
        # convex and non-decreasing from x = 0 on: refit without the linear term
        a, c = least_squares_line([x * x for x in xs], ts)
        b = 0.0
    if c <= 0:
        return None
    res = _residuals(points, lambda x: a + b * x + c * x * x)
    return StepCostFit(
        kind="quadratic",
        intercept_s=a,
        slope_s_per_token=b,
        curvature_s_per_token2=c,
        points=res.points,
        rmse_s=res.rmse_s,
        max_relative_residual=res.worst,
        notes=(
            f"a line misses a point by {linear.max_relative_residual:.1%} and step time grows "
            "faster than linearly: quadratic fit",
        ),
    )


def _monotone_knots(xs: Sequence[float], ts: Sequence[float]) -> list[tuple[float, float]]:
    by_x: dict[float, list[float]] = {}
    for x, t in zip(xs, ts, strict=True):
        by_x.setdefault(x, []).append(t)
    ordered = sorted(by_x)
    means = [sum(by_x[x]) / len(by_x[x]) for x in ordered]
    pooled = isotonic(means, [float(len(by_x[x])) for x in ordered], increasing=True)
    return list(zip(ordered, pooled, strict=True))


def _interpolate(
    knots: Sequence[tuple[float, float]], left: float, right: float, x: float
) -> float:
    first_x, first_t = knots[0]
    last_x, last_t = knots[-1]
    if x <= first_x:
        return first_t - left * (first_x - x)
    if x >= last_x:
        return last_t + right * (x - last_x)
    for (x0, t0), (x1, t1) in pairwise(knots):
        if x0 <= x <= x1:
            return t0 + (t1 - t0) * (x - x0) / (x1 - x0)
    raise AssertionError("unreachable: x lies between the knots")


class _Residuals(NamedTuple):
    points: tuple[FitPoint, ...]
    rmse_s: float
    worst: float


def _residuals(points: Sequence[CostPoint], model: Callable[[float], float]) -> _Residuals:
    fitted_points: list[FitPoint] = []
    for point in points:
        fitted = model(point.drafted_tokens)
        residual = point.seconds - fitted
        fitted_points.append(
            FitPoint(
                k=point.k,
                drafted_tokens=point.drafted_tokens,
                seconds=point.seconds,
                fitted_s=fitted,
                residual_s=residual,
                relative_residual=residual / fitted if fitted > 0 else math.inf,
            )
        )
    rmse = math.sqrt(sum(p.residual_s**2 for p in fitted_points) / len(fitted_points))
    worst = max(abs(p.relative_residual) for p in fitted_points)
    return _Residuals(tuple(fitted_points), rmse, worst)
