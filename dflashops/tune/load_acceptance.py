"""Acceptance per position at each load level, and whether it moves with load.

The concurrency-1 tuner assumes one acceptance curve. Under load it need not hold: batching
changes nothing in the drafter's maths, but a workload's long and short requests finish at
different times, so the requests in flight at c=16 are not the mix seen at c=1, and some engines
cut drafts under memory pressure. So each level keeps its own curve (merged over the k measured
there) and this module says whether the curves differ by more than noise.

Noise at position i between two levels: the larger of ``ACCEPTANCE_NOISE`` and
``NOISE_SIGMAS`` standard errors of the difference of two proportions over the levels' drafts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dflashops.errors import TuneInputError
from dflashops.tune.acceptance import AcceptanceCurve, Extrapolation, acceptance_curve
from dflashops.tune.load_runs import LevelRun, by_level
from dflashops.tune.runs import curve_from_runs

# two benches of the same server at the same load differ by about 0.01 per position (the H200
# sweep: acceptance length 2.83 vs 2.87 over four positions); three times that is a real move
ACCEPTANCE_NOISE = 0.03
NOISE_SIGMAS = 3.0
# moves named in the finding; the rest stay in the structured result
SHOWN_MOVES = 3


class AcceptanceShift(BaseModel):
    """Acceptance at one position, at the reference level and at another level."""

    model_config = ConfigDict(frozen=True)

    position: int
    from_level: int
    from_rate: float
    to_level: int
    to_rate: float
    noise: float

    @property
    def delta(self) -> float:
        return self.to_rate - self.from_rate

    @property
    def beyond_noise(self) -> bool:
        return abs(self.delta) > self.noise

    def sentence(self) -> str:
        return (
            f"position {self.position}: {self.from_rate:.3f} at c={self.from_level} → "
            f"{self.to_rate:.3f} at c={self.to_level} ({self.delta:+.3f}, noise "
            f"±{self.noise:.3f})"
        )


class AcceptanceCheck(BaseModel):
    """Whether per-position acceptance moved between levels, with the numbers."""

    model_config = ConfigDict(frozen=True)

    reference_level: int | None
    levels: tuple[int, ...]
    moved: tuple[AcceptanceShift, ...]
    largest: AcceptanceShift | None
    finding: str

    @property
    def moves(self) -> bool:
        return bool(self.moved)


def level_curves(
    runs: Sequence[LevelRun], extrapolation: Extrapolation = Extrapolation.GEOMETRIC
) -> dict[int, AcceptanceCurve]:
    """Each level's acceptance, merged over the k measured there (levels without any: absent).

    Past the positions a level measured, its curve follows the decay of the curve pooled over
    every level (a deeper k measured elsewhere knows more about the tail than one level's last
    rate does); past those too, the usual extrapolation."""
    pooled = pooled_curve(runs, extrapolation)
    curves: dict[int, AcceptanceCurve] = {}
    for level, level_runs in by_level(runs).items():
        curve = _curve([run for run in level_runs if run.k > 0], extrapolation)
        if curve is not None:
            curves[level] = _extended(curve, pooled, extrapolation)
    return curves


def pooled_curve(
    runs: Sequence[LevelRun], extrapolation: Extrapolation = Extrapolation.GEOMETRIC
) -> AcceptanceCurve | None:
    """Every level's acceptance merged: the stand-in for a level that measured none."""
    return _curve([run for run in runs if run.k > 0], extrapolation)


def check_acceptance(runs: Sequence[LevelRun]) -> AcceptanceCheck:
    """Compare each level's per-position acceptance with the lowest level's."""
    positions = _positions_by_level(runs)
    levels = tuple(sorted(positions))
    if len(levels) < 2:
        return AcceptanceCheck(
            reference_level=levels[0] if levels else None,
            levels=levels,
            moved=(),
            largest=None,
            finding="per-position acceptance was measured at fewer than two levels: "
            "not checked against load",
        )
    reference = levels[0]
    shifts = [
        _shift(position, reference, positions[reference][position], level, rates[position])
        for level in levels[1:]
        for rates in [positions[level]]
        for position in sorted(set(rates) & set(positions[reference]))
    ]
    ranked = sorted(shifts, key=lambda s: (-abs(s.delta), s.position, s.to_level))
    moved = tuple(shift for shift in ranked if shift.beyond_noise)
    largest = ranked[0] if ranked else None
    return AcceptanceCheck(
        reference_level=reference,
        levels=levels,
        moved=moved,
        largest=largest,
        finding=_finding(levels, moved, largest),
    )


def _finding(
    levels: tuple[int, ...], moved: tuple[AcceptanceShift, ...], largest: AcceptanceShift | None
) -> str:
    span = f"c={levels[0]}..{levels[-1]}"
    if moved:
        # position 0 first: it carries the most tokens, and the issue asks for it by name
        shown = sorted(moved[:SHOWN_MOVES], key=lambda s: (s.position != 0, -abs(s.delta)))
        first = next((s for s in moved if s.position == 0), None)
        if first is not None and first not in shown:
            shown = [first, *shown[: SHOWN_MOVES - 1]]
        more = f" (+{len(moved) - len(shown)} more)" if len(moved) > len(shown) else ""
        return (
            f"acceptance moves with load across {span}: "
            + "; ".join(s.sentence() for s in shown)
            + f"{more}; each level is predicted with its own acceptance"
        )
    if largest is None:
        return f"no acceptance position was measured at two levels of {span}: not checked"
    return (
        f"acceptance per position holds across {span} (largest move {largest.sentence()}, "
        "within noise)"
    )


class _Rate(BaseModel):
    model_config = ConfigDict(frozen=True)

    rate: float
    drafts: int | None


def _positions_by_level(runs: Sequence[LevelRun]) -> dict[int, dict[int, _Rate]]:
    """Per level, per measured position: the drafts-weighted rate and the drafts behind it
    (None when a run did not say how many drafts it had)."""
    out: dict[int, dict[int, _Rate]] = {}
    for level, level_runs in by_level(runs).items():
        measured = [run for run in level_runs if run.acceptance]
        if not measured:
            continue
        depth = max(len(run.acceptance or ()) for run in measured)
        rates: dict[int, _Rate] = {}
        for position in range(depth):
            at = [run for run in measured if len(run.acceptance or ()) > position]
            weights = [float(run.num_drafts or 1) for run in at]
            rate = sum(
                (run.acceptance or ())[position] * w for run, w in zip(at, weights, strict=True)
            ) / sum(weights)
            known = all(run.num_drafts for run in at)
            drafts = sum(run.num_drafts or 0 for run in at) if known else None
            rates[position] = _Rate(rate=rate, drafts=drafts)
        out[level] = rates
    return out


def _shift(position: int, low_level: int, low: _Rate, level: int, high: _Rate) -> AcceptanceShift:
    variance = sum(
        side.rate * (1.0 - side.rate) / side.drafts for side in (low, high) if side.drafts
    )
    noise = max(ACCEPTANCE_NOISE, NOISE_SIGMAS * math.sqrt(variance))
    return AcceptanceShift(
        position=position,
        from_level=low_level,
        from_rate=low.rate,
        to_level=level,
        to_rate=high.rate,
        noise=noise,
    )


def _extended(
    curve: AcceptanceCurve, pooled: AcceptanceCurve | None, extrapolation: Extrapolation
) -> AcceptanceCurve:
    depth = curve.measured_positions
    if pooled is None or pooled.measured_positions <= depth or pooled.rates[depth - 1] <= 0:
        return curve
    scale = curve.rates[-1] / pooled.rates[depth - 1]
    tail = [pooled.rates[i] * scale for i in range(depth, pooled.measured_positions)]
    return acceptance_curve(
        [*curve.rates, *tail],
        draft_fraction=curve.draft_fraction or None,
        extrapolation=extrapolation,
        source=f"{curve.source}; past position {depth - 1} the pooled curve's decay",
    )


def _curve(runs: Sequence[LevelRun], extrapolation: Extrapolation) -> AcceptanceCurve | None:
    informed = [run for run in runs if run.acceptance or run.acceptance_length is not None]
    if not informed:
        return None
    try:
        return curve_from_runs([run.tune_run() for run in informed], extrapolation)
    except TuneInputError as exc:
        level = informed[0].level
        raise TuneInputError(
            f"level c={level}: {exc.message}", field=exc.field, hint=exc.hint
        ) from exc
