"""One level's predictions and choice, and how the load mix scores a k or a schedule over them.

The objective's score of k at a level is its tok/s (measured where it was measured, else
predicted), 0 past the TPOT SLO. The mix weighs the levels (``tune.load_mix``, equal by default):
Σ_level w_level·score(level, k) is the tok/s a server spending a share w of its time at each level
serves. The single k for an engine without a schedule maximises it, and a schedule's predicted
gain is its own weighted score against that k's: both go through ``mix_scores``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from dflashops.tune.acceptance import AcceptanceCurve
from dflashops.tune.load_cost import LevelCost
from dflashops.tune.load_settings import LoadSettings
from dflashops.tune.model import choose_k


class LevelPrediction(BaseModel):
    """One k at one level: the model's numbers and what was measured."""

    model_config = ConfigDict(frozen=True)

    k: int
    tokens_per_step: float
    drafted_tokens: float
    step_time_s: float | None
    predicted_tok_s: float | None
    measured_tok_s: float | None
    tok_s: float = Field(description="what the choice uses: measured, else predicted")
    tpot_ms: float | None = Field(description="measured median TPOT, else predicted")
    meets_slo: bool | None = Field(description="None without an SLO")
    acceptance_extrapolated: bool = False
    cost_extrapolated: bool = False


class LevelChoice(BaseModel):
    """One level: its predictions and its k*."""

    model_config = ConfigDict(frozen=True)

    level: int
    batch: float
    best_k: int
    best_tok_s: float
    best_measured_k: int | None
    predictions: tuple[LevelPrediction, ...]
    acceptance: AcceptanceCurve | None
    acceptance_source: str
    cost: LevelCost
    tpot_ratio: float = Field(description="ρ: measured median TPOT over 1000·B/T")
    notes: tuple[str, ...] = ()

    def prediction(self, k: int) -> LevelPrediction | None:
        return next((row for row in self.predictions if row.k == k), None)


class SingleK(BaseModel):
    """The one k that serves the load mix best."""

    model_config = ConfigDict(frozen=True)

    k: int
    score_tok_s: float
    weights: dict[int, float]
    per_level_tok_s: dict[int, float]
    sentence: str


def objective_score(choice: LevelChoice, k: int, *, measured_only: bool = False) -> float | None:
    """The objective's score of k at one level: its tok/s, 0 past the TPOT SLO (None: k not
    scored there, or only predicted when ``measured_only``)."""
    row = choice.prediction(k)
    if row is None or (measured_only and row.measured_tok_s is None):
        return None
    return 0.0 if row.meets_slo is False else row.tok_s


def mix_scores(
    choices: Sequence[LevelChoice],
    weights: Mapping[int, float],
    k_at: int | Callable[[LevelChoice], int],
    *,
    measured_only: bool = False,
) -> dict[int, float] | None:
    """Every weighted level's score when it serves ``k_at`` (one k, or a schedule's k at the
    level's batch); None when a weighted level has none. The single k and a schedule's
    predicted gain are both weighed by it, so they cannot drift apart."""
    scores: dict[int, float] = {}
    for choice in choices:
        if weights[choice.level] <= 0:
            continue
        k = k_at if isinstance(k_at, int) else k_at(choice)
        score = objective_score(choice, k, measured_only=measured_only)
        if score is None:
            return None
        scores[choice.level] = score
    return scores


def weighted_total(scores: Mapping[int, float], weights: Mapping[int, float]) -> float:
    return sum(weights[level] * score for level, score in scores.items())


def single_k(
    choices: Sequence[LevelChoice], settings: LoadSettings, *, measured_only: bool = False
) -> SingleK | None:
    """The k that maximises the mix's weighted score, among k scored at every weighted level
    (``measured_only``: measured there, not predicted)."""
    weights = settings.weights()
    weighted = [choice for choice in choices if weights[choice.level] > 0]
    ks = {row.k for choice in weighted for row in choice.predictions}
    per_k: dict[int, dict[int, float]] = {}
    for k in sorted(ks if measured_only else settings.candidates()):
        scores = mix_scores(choices, weights, k, measured_only=measured_only)
        if scores is not None:
            per_k[k] = scores
    if not per_k:
        return None
    totals = {k: weighted_total(by, weights) for k, by in per_k.items()}
    k = choose_k(totals, settings.tolerance)
    within = " within the SLO" if settings.tpot_slo_ms is not None else ""
    what = "speculation off" if k == 0 else f"k={k}"
    measured = " measured" if measured_only else ""
    return SingleK(
        k=k,
        score_tok_s=totals[k],
        weights=weights,
        per_level_tok_s=per_k[k],
        sentence=(
            f"{what} maximises{measured} {settings.objective} over the load mix "
            f"({settings.describe_mix()}): {totals[k]:.1f} tok/s weighted{within}"
        ),
    )
