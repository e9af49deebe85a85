"""The little numerics the tuner needs (no numpy: a handful of points never warrants it)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence


def weighted_mean(values: Sequence[float], weights: Sequence[float]) -> float:
    total = sum(weights)
    if total <= 0:
        raise ValueError("weights must sum to a positive number")
    return sum(v * w for v, w in zip(values, weights, strict=True)) / total


def isotonic(
    values: Sequence[float], weights: Sequence[float] | None = None, *, increasing: bool
) -> list[float]:
    """Weighted least-squares fit constrained to be monotone (pool adjacent violators).

    Used to make merged acceptance non-increasing and measured step times non-decreasing without
    moving any value further than the noise forces it to.
    """
    ws = list(weights) if weights is not None else [1.0] * len(values)
    sign = 1.0 if increasing else -1.0
    # blocks of [mean (sign-adjusted), weight, count]; the adjusted sequence must not decrease
    blocks: list[list[float]] = []
    for value, weight in zip(values, ws, strict=True):
        blocks.append([sign * value, weight, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean_b, w_b, n_b = blocks.pop()
            mean_a, w_a, n_a = blocks[-1]
            weight_sum = w_a + w_b
            blocks[-1] = [(mean_a * w_a + mean_b * w_b) / weight_sum, weight_sum, n_a + n_b]
    fitted: list[float] = []
    for mean, _, count in blocks:
        fitted.extend([sign * mean] * int(count))
    return fitted


def least_squares_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Intercept and slope of the ordinary least-squares line through ``(xs, ys)``."""
    n = len(xs)
    if n != len(ys) or n < 2:
        raise ValueError("need at least two points")
    mean_x = sum(xs) / n
    mean_y = sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError("all x are equal")
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    return mean_y - slope * mean_x, slope


def least_squares_quadratic(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """``(a, b, c)`` of the least-squares ``y = a + b·x + c·x²`` (normal equations, pivoted)."""
    if len(set(xs)) < 3 or len(xs) != len(ys):
        raise ValueError("need three distinct x")
    moments = [sum(x**power for x in xs) for power in range(5)]
    rhs = [sum(y * x**power for x, y in zip(xs, ys, strict=True)) for power in range(3)]
    rows = [[*(moments[i + j] for j in range(3)), rhs[i]] for i in range(3)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda row: abs(rows[row][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for row in range(3):
            if row != col:
                factor = rows[row][col] / rows[col][col]
                rows[row] = [v - factor * w for v, w in zip(rows[row], rows[col], strict=True)]
    a, b, c = (rows[i][3] / rows[i][i] for i in range(3))
    return a, b, c


def log_slope(values: Sequence[float]) -> float:
    """Per-step ratio of the least-squares exponential through positive ``values``."""
    if len(values) < 2:
        raise ValueError("need at least two values")
    _, slope = least_squares_line(
        [float(i) for i in range(len(values))], [math.log(v) for v in values]
    )
    return math.exp(slope)


def bisect(
    fn: Callable[[float], float], lo: float, hi: float, target: float, *, iterations: int = 100
) -> float:
    """The ``x`` in ``[lo, hi]`` where the increasing function ``fn`` reaches ``target``."""
    for _ in range(iterations):
        mid = (lo + hi) / 2
        if fn(mid) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
