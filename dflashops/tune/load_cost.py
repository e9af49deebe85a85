"""Step time as a function of batch size and draft tokens, fitted to the levels measured.

Two layers, because one closed form does not fit every machine:

- **per level** (running batch B): the concurrency-1 fit of ``stepcost.py`` over the k measured
  at that level, t_B(x) with x = drafted tokens per sequence. It is exact enough at every
  measured level whatever the shape: flat on a GPU that is still bound by reading the weights,
  growing on a CPU (or a GPU past its compute ridge) where every verified token costs work;
- **across levels**, the smooth model t(B, x) = a + b·B + (c + d·B)·x, fitted by non-negative
  least squares to every measured step: a, the fixed cost of a step (weights read once, the
  drafter's pass); b, each sequence's own token; c, a draft token's cost that batching shares
  (a drafter that loops per token); d, each verified draft token of each sequence (the verify
  forward's compute). Plain decode (k = 0) gets t0(B) = a0 + b0·B.

Predictions at a measured level use that level's fit. Between two levels the step time is
interpolated linearly in B between the two levels' fits (exact at both ends; a compute ridge
between them is not seen, the same blind spot a bucket between two measured k is at c=1). A level
that measured one speculative k only borrows its slope per draft token from the smooth model at
its batch. The smooth model's residuals are reported: it is the readable summary and the slope
source, not the predictor at measured levels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from itertools import combinations, pairwise

from pydantic import BaseModel, ConfigDict, Field

from dflashops.tune.acceptance import AcceptanceCurve
from dflashops.tune.load_runs import LevelRun, by_level
from dflashops.tune.stepcost import CostPoint, FitMethod, StepCostFit, fit_step_cost

# a pivot this small next to the matrix's largest entry means the columns are collinear
SINGULAR = 1e-12


class CrossLevelFit(BaseModel):
    """t(B, x) = a + b·B + (c + d·B)·x seconds, every coefficient ≥ 0."""

    model_config = ConfigDict(frozen=True)

    intercept_s: float = Field(description="a: fixed seconds per step")
    per_sequence_s: float = Field(description="b: seconds per sequence in the batch")
    per_draft_token_s: float = Field(description="c: seconds per draft token, batch-shared")
    per_batch_draft_token_s: float = Field(description="d: seconds per verified draft token")
    max_relative_residual: float
    points: int

    def seconds(self, batch: float, drafted: float) -> float:
        return self.intercept_s + self.per_sequence_s * batch + self.slope(batch) * drafted

    def slope(self, batch: float) -> float:
        """Seconds one more draft token per sequence adds to a step at this batch."""
        return self.per_draft_token_s + self.per_batch_draft_token_s * batch

    def equation(self) -> str:
        return (
            f"t(B, x) = {self.intercept_s * 1e3:.3f} ms + {self.per_sequence_s * 1e3:.3f} ms·B "
            f"+ ({self.per_draft_token_s * 1e3:.3f} ms + "
            f"{self.per_batch_draft_token_s * 1e3:.3f} ms·B)·x"
        )


class PlainCostFit(BaseModel):
    """t0(B) = a0 + b0·B seconds for a plain decode step (k = 0)."""

    model_config = ConfigDict(frozen=True)

    intercept_s: float
    per_sequence_s: float
    max_relative_residual: float
    points: int

    def seconds(self, batch: float) -> float:
        return self.intercept_s + self.per_sequence_s * batch

    def equation(self) -> str:
        return f"t0(B) = {self.intercept_s * 1e3:.3f} ms + {self.per_sequence_s * 1e3:.3f} ms·B"


class LevelCost(BaseModel):
    """The step times one level measured, and its own fit."""

    model_config = ConfigDict(frozen=True)

    level: int
    batch: float = Field(description="mean running batch over the level's runs")
    plain_step_s: float | None = Field(description="k = 0: B / T, mean over its runs")
    points: tuple[CostPoint, ...] = Field(description="speculative steps: (k, x, B·τ/T)")
    fit: StepCostFit | None = Field(description="t_B(x), with 2+ distinct x at this level")
    anchor_slope_s_per_token: float | None = Field(
        default=None, description="one measured x only: the smooth model's slope at this batch"
    )

    def seconds(self, drafted: float) -> float | None:
        """t_B(x), or None when this level cannot say (no speculative step, or one step and no
        slope to move away from it)."""
        if self.fit is not None:
            return self.fit.seconds(drafted)
        if not self.points:
            return None
        anchor = self.points[0]
        if abs(drafted - anchor.drafted_tokens) < 1e-9:
            return anchor.seconds
        if self.anchor_slope_s_per_token is None:
            return None
        return anchor.seconds + self.anchor_slope_s_per_token * (drafted - anchor.drafted_tokens)

    def extrapolates(self, drafted: float) -> bool:
        if self.fit is not None:
            return self.fit.extrapolates(drafted)
        return all(abs(drafted - p.drafted_tokens) > 1e-9 for p in self.points)


class LoadCostModel(BaseModel):
    """Per-level fits, interpolated across batch sizes, and the smooth model beside them."""

    model_config = ConfigDict(frozen=True)

    levels: tuple[LevelCost, ...]
    cross: CrossLevelFit | None
    plain: PlainCostFit | None
    notes: tuple[str, ...] = ()

    def level(self, level: int) -> LevelCost:
        return next(cost for cost in self.levels if cost.level == level)

    def spec_seconds(self, batch: float, drafted: float) -> float | None:
        """Speculative step time at any batch: the levels' own fits, linear in B between them."""
        return _interpolate([(cost.batch, cost.seconds(drafted)) for cost in self.levels], batch)

    def plain_seconds(self, batch: float) -> float | None:
        return _interpolate([(cost.batch, cost.plain_step_s) for cost in self.levels], batch)


def fit_load_costs(
    runs: Sequence[LevelRun],
    curves: Mapping[int, AcceptanceCurve],
    fallback: AcceptanceCurve | None,
    method: FitMethod = FitMethod.AUTO,
) -> LoadCostModel:
    """Fit every level's step times, then the smooth model across levels.

    ``curves`` are the levels' own acceptance (τ for runs that did not measure their own, and
    the drafted tokens x per k); ``fallback`` stands in at a level without one."""
    notes: list[str] = []
    raw: list[tuple[int, float, float | None, list[CostPoint]]] = []
    spec_samples: list[tuple[float, float, float]] = []
    plain_samples: list[tuple[float, float]] = []
    for level, level_runs in by_level(runs).items():
        curve = curves.get(level, fallback)
        points: list[CostPoint] = []
        plain: list[float] = []
        for run in level_runs:
            seconds = run.step_seconds(curve)
            if seconds is None:
                notes.append(f"c={level} k={run.k}: no acceptance to turn tok/s into a step time")
                continue
            if run.k == 0:
                plain.append(seconds)
                plain_samples.append((run.batch, seconds))
                continue
            drafted = _drafted(run, curve)
            points.append(CostPoint(k=run.k, drafted_tokens=drafted, seconds=seconds))
            spec_samples.append((run.batch, drafted, seconds))
        batch = sum(run.batch for run in level_runs) / len(level_runs)
        raw.append((level, batch, sum(plain) / len(plain) if plain else None, points))
    cross = _fit_cross(spec_samples)
    costs = [
        _level_cost(level, batch, plain, points, cross=cross, method=method)
        for level, batch, plain, points in raw
    ]
    return LoadCostModel(
        levels=tuple(costs), cross=cross, plain=_fit_plain(plain_samples), notes=tuple(notes)
    )


def _drafted(run: LevelRun, curve: AcceptanceCurve | None) -> float:
    if run.drafted_per_draft is not None:
        return run.drafted_per_draft
    return curve.drafted_tokens(run.k) if curve is not None else float(run.k)


def _level_cost(
    level: int,
    batch: float,
    plain: float | None,
    points: list[CostPoint],
    *,
    cross: CrossLevelFit | None,
    method: FitMethod,
) -> LevelCost:
    fit = None
    if len({p.drafted_tokens for p in points}) >= 2:
        fit = fit_step_cost(points, method)
    elif len(points) > 1:
        # the same x measured twice: one point, their mean
        mean = sum(p.seconds for p in points) / len(points)
        points = [points[0].model_copy(update={"seconds": mean})]
    return LevelCost(
        level=level,
        batch=batch,
        plain_step_s=plain,
        points=tuple(points),
        fit=fit,
        anchor_slope_s_per_token=None if fit is not None or cross is None else cross.slope(batch),
    )


def _fit_cross(samples: Sequence[tuple[float, float, float]]) -> CrossLevelFit | None:
    """a + b·B + (c + d·B)·x; None unless the samples span two batches and two x (otherwise
    the per-sequence and per-token terms cannot be told apart)."""
    if len({b for b, _, _ in samples}) < 2 or len({x for _, x, _ in samples}) < 2:
        return None
    columns: list[Callable[[float, float], float]] = [
        lambda b, x: 1.0,
        lambda b, x: b,
        lambda b, x: x,
        lambda b, x: b * x,
    ]
    coefficients = _non_negative_fit(
        [[column(b, x) for column in columns] for b, x, _ in samples], [t for _, _, t in samples]
    )
    if coefficients is None:
        return None
    a, b_, c, d = coefficients
    fitted = [a + b_ * b + (c + d * b) * x for b, x, _ in samples]
    return CrossLevelFit(
        intercept_s=a,
        per_sequence_s=b_,
        per_draft_token_s=c,
        per_batch_draft_token_s=d,
        max_relative_residual=_worst([t for _, _, t in samples], fitted),
        points=len(samples),
    )


def _fit_plain(samples: Sequence[tuple[float, float]]) -> PlainCostFit | None:
    if len({b for b, _ in samples}) < 2:
        return None
    coefficients = _non_negative_fit([[1.0, b] for b, _ in samples], [t for _, t in samples])
    if coefficients is None:
        return None
    a, b_ = coefficients
    return PlainCostFit(
        intercept_s=a,
        per_sequence_s=b_,
        max_relative_residual=_worst([t for _, t in samples], [a + b_ * b for b, _ in samples]),
        points=len(samples),
    )


def _non_negative_fit(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Least squares with every coefficient ≥ 0: the best of the unconstrained fits over every
    subset of columns whose solution is non-negative (four columns: sixteen small solves)."""
    width = len(rows[0])
    best: tuple[float, int, list[float]] | None = None
    for size in range(1, width + 1):
        for subset in combinations(range(width), size):
            solution = _least_squares([[row[i] for i in subset] for row in rows], ys)
            if solution is None or any(value < 0 for value in solution):
                continue
            full = [0.0] * width
            for index, value in zip(subset, solution, strict=True):
                full[index] = value
            sse = sum(
                (y - sum(c * v for c, v in zip(full, row, strict=True))) ** 2
                for row, y in zip(rows, ys, strict=True)
            )
            # a subset with fewer columns wins a tie (within float noise): fewer terms to explain
            if best is None or sse < best[0] * (1 - 1e-9) - 1e-30:
                best = (sse, size, full)
    return None if best is None else best[2]


def _least_squares(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float] | None:
    """Normal equations, Gauss-Jordan with partial pivoting; None when the columns are
    collinear."""
    width = len(rows[0])
    if len(rows) < width:
        return None
    matrix = [
        [
            *(sum(row[i] * row[j] for row in rows) for j in range(width)),
            sum(row[i] * y for row, y in zip(rows, ys, strict=True)),
        ]
        for i in range(width)
    ]
    scale = max(abs(matrix[i][i]) for i in range(width)) or 1.0
    for col in range(width):
        pivot = max(range(col, width), key=lambda r: abs(matrix[r][col]))
        if abs(matrix[pivot][col]) <= SINGULAR * scale:
            return None
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        for r in range(width):
            if r != col:
                factor = matrix[r][col] / matrix[col][col]
                matrix[r] = [v - factor * w for v, w in zip(matrix[r], matrix[col], strict=True)]
    return [matrix[i][width] / matrix[i][i] for i in range(width)]


def _worst(measured: Sequence[float], fitted: Sequence[float]) -> float:
    return max(
        (abs(m - f) / f if f > 0 else float("inf") for m, f in zip(measured, fitted, strict=True)),
        default=0.0,
    )


def _interpolate(values: Sequence[tuple[float, float | None]], batch: float) -> float | None:
    """Linear in batch between the nearest known values; the end values past either end."""
    known = sorted((b, v) for b, v in values if v is not None)
    if not known:
        return None
    if batch <= known[0][0]:
        return known[0][1]
    if batch >= known[-1][0]:
        return known[-1][1]
    for (b0, v0), (b1, v1) in pairwise(known):
        if b0 <= batch <= b1:
            return v0 if b1 == b0 else v0 + (v1 - v0) * (batch - b0) / (b1 - b0)
    raise AssertionError("unreachable: batch lies between the known values")
