"""One measured run at one k, and what the tuner learns from a set of them.

Both the offline CLI (``--step-cost``, ``--throughput``, ``--from``) and a live driver (one run per
launch) speak ``TuneRun``: the acceptance curve is merged across runs and each timed run becomes
one step-time point.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dflashops.errors import TuneInputError
from dflashops.tune.acceptance import (
    ROUNDING_TOLERANCE,
    AcceptanceCurve,
    Extrapolation,
    acceptance_curve,
    alpha_from_acceptance_length,
)
from dflashops.tune.fitmath import isotonic, weighted_mean
from dflashops.tune.stepcost import CostPoint

# a k is vLLM's num_speculative_tokens; no drafter in use drafts more than a few dozen, and a
# bound keeps every per-k loop (acceptance curves, predictions) small whatever a file says
K_LIMIT = 64


class TuneRun(BaseModel):
    """What one benchmark at ``num_speculative_tokens = k`` measured (batch 1, decode only).

    Give the step time or the single-stream output throughput (the step time is then
    tokens-per-step / throughput), and per-position acceptance or at least the mean acceptance
    length. ``drafted_per_draft`` (vLLM's draft tokens / drafts) matters for drafters that may
    propose fewer than k tokens (n-gram); ``num_drafts`` weights runs when merging acceptance.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    k: int = Field(ge=1, le=K_LIMIT, description="num_speculative_tokens of this run")
    output_tok_s: float | None = Field(
        default=None, gt=0, description="single-stream output tokens per second (decode)"
    )
    step_time_s: float | None = Field(default=None, gt=0, description="seconds per verify step")
    acceptance: tuple[float, ...] | None = Field(
        default=None, description="unconditional per-position acceptance, at most k values"
    )
    acceptance_length: float | None = Field(
        default=None, ge=1, description="mean tokens per verify step, bonus token included"
    )
    drafted_per_draft: float | None = Field(
        default=None, ge=0, description="mean draft tokens actually proposed per draft"
    )
    num_drafts: int | None = Field(default=None, ge=1, description="weight when merging runs")
    label: str | None = Field(default=None, description="where the run came from")

    @model_validator(mode="after")
    def _fits_k(self) -> TuneRun:
        if self.acceptance is not None and not 0 < len(self.acceptance) <= self.k:
            raise ValueError(f"acceptance must have 1..k={self.k} values")
        if (
            self.acceptance_length is not None
            and self.acceptance_length > self.k + 1 + ROUNDING_TOLERANCE
        ):
            raise ValueError(f"acceptance length above k + 1 = {self.k + 1}")
        if (
            self.drafted_per_draft is not None
            and self.drafted_per_draft > self.k + ROUNDING_TOLERANCE
        ):
            raise ValueError(f"more tokens drafted per draft than k = {self.k}")
        return self

    @property
    def timed(self) -> bool:
        return self.step_time_s is not None or self.output_tok_s is not None

    def own_tokens_per_step(self) -> float | None:
        """Tokens per step this run measured itself, if it measured them at its own k."""
        if self.acceptance_length is not None:
            return self.acceptance_length
        if self.acceptance is not None and len(self.acceptance) == self.k:
            return 1.0 + sum(self.acceptance)
        return None


def curve_from_runs(
    runs: Sequence[TuneRun], extrapolation: Extrapolation = Extrapolation.GEOMETRIC
) -> AcceptanceCurve:
    """Merge the runs' acceptance into one curve (assumes r_i does not depend on k).

    Position i is the mean over the runs that measured it, weighted by their drafts; the merged
    curve is then made non-increasing (pooling violators). With no per-position data, a constant
    conditional rate is solved from the runs' mean acceptance lengths.
    """
    with_positions = [run for run in runs if run.acceptance is not None]
    for run in with_positions:
        # each run on its own: a rising run is an input error, not noise to average away
        try:
            acceptance_curve(run.acceptance or ())
        except TuneInputError as exc:
            raise TuneInputError(
                f"{_name(run)}: {exc.message}", field=exc.field, hint=exc.hint
            ) from exc
    drafted = _merged_drafted_share(runs)
    if with_positions:
        depth = max(len(run.acceptance or ()) for run in with_positions)
        rates: list[float] = []
        weights: list[float] = []
        for position in range(depth):
            measured = [run for run in with_positions if len(run.acceptance or ()) > position]
            run_weights = [float(run.num_drafts or 1) for run in measured]
            rates.append(
                weighted_mean([(run.acceptance or ())[position] for run in measured], run_weights)
            )
            weights.append(sum(run_weights))
        merged = isotonic(rates, weights, increasing=False)
        return acceptance_curve(
            merged,
            drafted_per_draft=None if drafted is None else drafted * len(merged),
            extrapolation=extrapolation,
            source=f"merged from {len(with_positions)} run(s)",
        )
    with_length = [run for run in runs if run.acceptance_length is not None]
    if not with_length:
        raise TuneInputError(
            "no acceptance: give --acceptance, or runs with per-position acceptance or an "
            "acceptance length",
            field="acceptance",
        )
    alpha = weighted_mean(
        [alpha_from_acceptance_length(run.acceptance_length or 1.0, run.k) for run in with_length],
        [float(run.num_drafts or 1) for run in with_length],
    )
    depth = max(run.k for run in with_length)
    return acceptance_curve(
        [alpha ** (i + 1) for i in range(depth)],
        drafted_per_draft=None if drafted is None else drafted * depth,
        extrapolation=extrapolation,
        source=f"constant conditional rate {alpha:.3f} solved from acceptance length",
    )


def cost_points(runs: Sequence[TuneRun], curve: AcceptanceCurve) -> list[CostPoint]:
    """One step-time point per timed run, priced by the draft tokens it actually checked."""
    points: list[CostPoint] = []
    for run in runs:
        if not run.timed:
            continue
        drafted = (
            run.drafted_per_draft
            if run.drafted_per_draft is not None
            else curve.drafted_tokens(run.k)
        )
        points.append(CostPoint(k=run.k, drafted_tokens=drafted, seconds=step_seconds(run, curve)))
    return points


def step_seconds(run: TuneRun, curve: AcceptanceCurve) -> float:
    if run.step_time_s is not None:
        return run.step_time_s
    if run.output_tok_s is None:
        raise ValueError("run is not timed")
    tokens = run.own_tokens_per_step() or curve.tokens_per_step(run.k)
    return tokens / run.output_tok_s


def measured_throughput(run: TuneRun) -> float | None:
    """Output tok/s the run saw: reported, or its step time with its own acceptance length.

    A bare step time (``--step-cost``) is not a throughput measurement: None.
    """
    if run.output_tok_s is not None:
        return run.output_tok_s
    tokens = run.own_tokens_per_step()
    if run.step_time_s is None or tokens is None:
        return None
    return tokens / run.step_time_s


def _merged_drafted_share(runs: Sequence[TuneRun]) -> float | None:
    """Mean fraction of the k slots that drafts filled, over runs that reported it."""
    reported = [run for run in runs if run.drafted_per_draft is not None]
    if not reported:
        return None
    return weighted_mean(
        [(run.drafted_per_draft or 0.0) / run.k for run in reported],
        [float(run.num_drafts or 1) for run in reported],
    )


def _name(run: TuneRun) -> str:
    return run.label or f"run at k={run.k}"
