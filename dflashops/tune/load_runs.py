"""One bench level at one k: what ``tune --load`` learns from a launch, level by level.

A launch serves one ``num_speculative_tokens = k`` (k = 0: speculation off) and the bench runs it
at every concurrency level; each level becomes one ``LevelRun``. The step time is not measured
directly: at a running batch of B sequences every engine step emits B·τ tokens (τ = tokens per
verify step, vLLM's acceptance length; 1 without speculation), so the effective step time is

    t = B·τ / T        (T = the level's aggregate output tok/s)

It is "effective": prefill chunks and scheduling gaps sit inside it, as they sit inside T, so a
prediction made from it is a prediction of T. The drafts counter says the same thing: the level
ran drafts / B verify steps, each emitting τ tokens.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dflashops.bench.models import BenchReport
from dflashops.errors import TuneInputError
from dflashops.tune.acceptance import AcceptanceCurve
from dflashops.tune.runs import K_LIMIT, TuneRun

# the bench's own bound on a concurrency level
MAX_LEVEL = 4096


#: the fields of a level run that average over repeats
RunField = Literal["output_tok_s", "batch", "median_ttft_ms", "median_tpot_ms"]


class LevelRun(BaseModel):
    """What one concurrency level measured with the server at ``num_speculative_tokens = k``."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    level: int = Field(ge=1, le=MAX_LEVEL, description="requests in flight (bench concurrency)")
    k: int = Field(ge=0, le=K_LIMIT, description="num_speculative_tokens; 0: speculation off")
    output_tok_s: float = Field(gt=0, description="aggregate output tokens/s at this level")
    median_tpot_ms: float | None = Field(default=None, gt=0)
    median_ttft_ms: float | None = Field(
        default=None, gt=0, description="where a schedule's loss hides when TPOT barely moves"
    )
    running_batch: float | None = Field(
        default=None, gt=0, description="mean sequences per engine step; absent: the level"
    )
    acceptance: tuple[float, ...] | None = Field(
        default=None, description="unconditional per-position acceptance, at most k values"
    )
    acceptance_length: float | None = Field(default=None, ge=1)
    drafted_per_draft: float | None = Field(default=None, ge=0)
    num_drafts: int | None = Field(default=None, ge=1)
    label: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> LevelRun:
        drafting = (self.acceptance, self.acceptance_length, self.drafted_per_draft)
        if self.k == 0 and any(value is not None for value in drafting):
            raise ValueError("a run at k=0 drafts nothing: no acceptance or drafted tokens")
        if self.k > 0:
            # the k ≥ 1 rules (acceptance within k, length ≤ k + 1) are TuneRun's
            self.tune_run()
        return self

    @property
    def batch(self) -> float:
        return self.running_batch if self.running_batch is not None else float(self.level)

    def own_tokens_per_step(self) -> float | None:
        """τ this run measured at its own k (1 without speculation), if it measured it."""
        if self.k == 0:
            return 1.0
        return self.tune_run().own_tokens_per_step()

    def step_seconds(self, curve: AcceptanceCurve | None = None) -> float | None:
        """The effective step time B·τ/T; τ from ``curve`` when the run has none of its own."""
        tokens = self.own_tokens_per_step()
        if tokens is None and curve is not None:
            tokens = curve.tokens_per_step(self.k)
        return None if tokens is None else self.batch * tokens / self.output_tok_s

    def tune_run(self, step_time_s: float | None = None) -> TuneRun:
        """This run as the concurrency-1 tuner's ``TuneRun`` (k ≥ 1), to reuse its merging."""
        return TuneRun(
            k=self.k,
            step_time_s=step_time_s,
            acceptance=self.acceptance,
            acceptance_length=self.acceptance_length,
            drafted_per_draft=self.drafted_per_draft,
            num_drafts=self.num_drafts,
            label=self.label,
        )


def by_level(runs: Sequence[LevelRun]) -> dict[int, list[LevelRun]]:
    """The runs grouped by level, levels ascending."""
    grouped: dict[int, list[LevelRun]] = {}
    for run in sorted(runs, key=lambda r: (r.level, r.k)):
        grouped.setdefault(run.level, []).append(run)
    return grouped


def mean_of(runs: Sequence[LevelRun], field: RunField) -> float | None:
    """The runs' mean of one field (``batch``: the running batch, else the level); None when
    there are no runs or one of them did not measure it."""
    values: list[float | None] = [getattr(run, field) for run in runs]
    measured = [value for value in values if value is not None]
    if not values or len(measured) < len(values):
        return None
    return sum(measured) / len(measured)


def mean_tok_s(runs: Sequence[LevelRun], level: int, k: int) -> float | None:
    """Mean measured output tok/s at (level, k), None when that pair was not measured."""
    return mean_of([run for run in runs if run.level == level and run.k == k], "output_tok_s")


def level_runs_from_report(
    report: BenchReport,
    origin: str,
    *,
    running_batch: Mapping[int, float] | None = None,
) -> list[LevelRun]:
    """One ``LevelRun`` per level of a bench report (k = 0 when the server did not speculate).

    ``running_batch`` maps a level to the mean running batch measured there (vLLM's
    ``num_requests_running``); a level without it is taken to run at its concurrency.
    """
    config = report.config
    k = 0 if config.method == "none" else config.num_speculative_tokens or 0
    out: list[LevelRun] = []
    for level in sorted(report.levels, key=lambda lv: lv.max_concurrency):
        where = f"{origin}: level c={level.max_concurrency}"
        if level.incomplete:
            raise TuneInputError(
                f"{where} is incomplete (the server stopped answering)",
                field="from",
                hint="bench again once the server answers",
            )
        if level.output_throughput <= 0:
            raise TuneInputError(f"{where} has no throughput", field="from")
        drafts = level.spec_decode_num_drafts if k else None
        drafted = (
            level.spec_decode_draft_tokens / drafts
            if drafts and level.spec_decode_draft_tokens is not None
            else None
        )
        positions = level.spec_decode_per_position_acceptance_rates if k else None
        try:
            out.append(
                LevelRun(
                    level=level.max_concurrency,
                    k=k,
                    output_tok_s=level.output_throughput,
                    median_tpot_ms=level.median_tpot_ms or None,
                    median_ttft_ms=level.median_ttft_ms or None,
                    running_batch=(running_batch or {}).get(level.max_concurrency),
                    acceptance=tuple(positions[:k]) if positions else None,
                    acceptance_length=level.spec_decode_acceptance_length if k else None,
                    drafted_per_draft=drafted,
                    num_drafts=drafts or None,
                    label=f"{origin} c={level.max_concurrency}",
                )
            )
        except ValidationError as exc:
            raise TuneInputError(f"{where}: {exc.errors()[0]['msg']}", field="from") from exc
    return out
