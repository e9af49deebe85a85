"""From k*(level) to what the server runs: a batch-size schedule, or one k and why.

The schedule's ranges go through each level's k* at its running batch. Between two levels
whose k* differ, the switch is where the two k's scores, each a straight line in the batch
between the two levels, trade places under the same tie rule as the levels' own choice (the
smallest k within the tolerance wins). A server whose engine has no schedule, or whose levels
all want the same k, gets one k: the load mix's best, or that k.

A schedule's sentence says what it is predicted to gain over that single k across the load mix:
vLLM serves a schedule with piecewise CUDA graphs, and on an H100 (vLLM 0.26.0, q8b, RESULTS.md)
that cost 15.3 % at c=32 and 6.9 % at c=8 against the same k served alone, while the schedule was
predicted to gain 1.7 % over one k; the verification refused it. The operator sees both numbers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from dflashops.errors import TuneInputError
from dflashops.tune.load_model import LoadResult
from dflashops.tune.load_scores import mix_scores, objective_score, weighted_total
from dflashops.tune.model import choose_k
from dflashops.tune.schedule import (
    Preference,
    ScheduleSupport,
    SpeculativeSchedule,
    render_schedule,
)

DecisionKind = Literal["schedule", "single_k", "off"]


class ScheduleDecision(BaseModel):
    """What the tuned server runs, before verification."""

    model_config = ConfigDict(frozen=True)

    kind: DecisionKind
    k: int
    schedule: SpeculativeSchedule
    support: ScheduleSupport
    sentence: str

    @property
    def needs_verification(self) -> bool:
        """A schedule is launched and benched once more; one k was benched as it is."""
        return self.kind == "schedule"

    @property
    def vllm_schedule(self) -> list[list[int]] | None:
        return self.schedule.as_vllm() if self.kind == "schedule" else None


def batch_points(result: LoadResult) -> dict[int, int]:
    """k* keyed by each level's running batch (rounded; the lower level keeps a shared batch)."""
    points: dict[int, int] = {}
    for choice in result.levels:
        points.setdefault(max(1, round(choice.batch)), choice.best_k)
    return points


def build_schedule(result: LoadResult, max_num_seqs: int) -> SpeculativeSchedule:
    """The schedule through k*(level), switching between levels where the model says."""
    return render_schedule(
        batch_points(result), max_num_seqs, prefer_upper=score_preference(result)
    )


def score_preference(result: LoadResult) -> Preference:
    """``prefer_upper`` from the levels' scores, straight lines in the batch between levels."""
    by_batch = {max(1, round(choice.batch)): choice for choice in result.levels}
    tolerance = result.settings.tolerance

    def prefer(batch: int, low: int, high: int) -> bool:
        below, above = by_batch[low], by_batch[high]
        k_low, k_high = below.best_k, above.best_k
        scores: dict[int, float] = {}
        for k in (k_low, k_high):
            ends = [objective_score(below, k), objective_score(above, k)]
            if ends[0] is None or ends[1] is None:
                return batch * batch > low * high  # no line to draw: the geometric midpoint
            share = (batch - low) / (high - low)
            scores[k] = ends[0] + (ends[1] - ends[0]) * share
        return choose_k(scores, tolerance) == k_high

    return prefer


def decide(result: LoadResult, support: ScheduleSupport, max_num_seqs: int) -> ScheduleDecision:
    """A schedule where the engine takes one and the levels want different k; else one k."""
    schedule = build_schedule(result, max_num_seqs)
    levels = f"c={result.levels[0].level}..{result.levels[-1].level}"
    if not support.supported:
        single = result.single_k
        if single is None:
            raise TuneInputError(
                f"{support.reason}, and no single k was measured or predicted at every level "
                "of the load mix",
                field="load",
            )
        return ScheduleDecision(
            kind="off" if single.k == 0 else "single_k",
            k=single.k,
            schedule=schedule,
            support=support,
            sentence=f"{support.reason}: one k for every batch size instead; {single.sentence}",
        )
    if schedule.is_static:
        k = schedule.ranges[0].k
        if k == 0:
            sentence = (
                f"speculation off wins at every level ({levels}): serve without speculation "
                "(drafter.method: none)"
            )
        else:
            sentence = (
                f"k*={k} at every level ({levels}): one k, no schedule (no thresholds to "
                "cross, full CUDA graphs kept)"
            )
        return ScheduleDecision(
            kind="off" if k == 0 else "single_k",
            k=k,
            schedule=schedule,
            support=support,
            sentence=sentence,
        )
    gain = predicted_gain(result, schedule)
    versus = (
        ""
        if gain is None or result.single_k is None
        else f", predicted {gain:+.1%} over the single k={result.single_k.k} across the load mix"
    )
    return ScheduleDecision(
        kind="schedule",
        k=schedule.max_k,
        schedule=schedule,
        support=support,
        sentence=(
            f"schedule {schedule.describe()}, served with num_speculative_tokens "
            f"{schedule.max_k} (the largest k: vLLM caps every range at it){versus}; to be "
            "verified against the best static k at every level"
        ),
    )


def predicted_gain(result: LoadResult, schedule: SpeculativeSchedule) -> float | None:
    """The schedule's weighted score over the load mix against the single k's, minus 1 (None:
    no single k, or a weighted level without a score for the schedule's k there)."""
    single = result.single_k
    if single is None or single.score_tok_s <= 0:
        return None
    weights = result.settings.weights()
    scores = mix_scores(
        result.levels, weights, lambda choice: schedule.k_at(max(1, round(choice.batch)))
    )
    if scores is None:
        return None
    return weighted_total(scores, weights) / single.score_tok_s - 1.0
