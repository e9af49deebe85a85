"""Keep the schedule or not: the verification bench against the static k measured per level.

A schedule earns its place only if, at every level, it serves within ``MAX_LOSS`` of the best
static k measured at that level. vllm#49548 is the shape this guards against: aggregate tok/s
collapsing (232 → 24–157) once concurrency crosses a schedule's threshold, and the piecewise
CUDA graphs a schedule forces costing −14 % single-stream. A refused schedule leaves the best
single k over the load mix (the best measured one: the model was just contradicted), and the
verdict names the level and the loss. Either way the schedule is also compared with the fixed
old concurrency-1 k, level by level.

The verdict serializes into ``tune.json`` (``model_dump``) and into the tuned playbook:
``server.num_speculative_tokens`` (the schedule's largest k, or the single k),
``server.speculative_schedule`` (``[[start, end, k], …]``, vLLM's own form; only when kept), and
one comment line above them with the sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dflashops.errors import TuneInputError
from dflashops.tune.load_model import LoadResult
from dflashops.tune.load_runs import LevelRun, RunField, mean_of
from dflashops.tune.load_schedule import ScheduleDecision

# a level this much below its best static k refuses the schedule (about twice run-to-run noise)
MAX_LOSS = 0.05


class LevelVerdict(BaseModel):
    """One level: the schedule measured against the static k measured there."""

    model_config = ConfigDict(frozen=True)

    level: int
    schedule_k: int
    schedule_tok_s: float
    best_static_k: int
    best_static_tok_s: float
    loss: float
    old_k_tok_s: float | None
    vs_old: float | None
    # the same level's median latencies, schedule against the best static k (None: not measured)
    schedule_ttft_ms: float | None = None
    best_static_ttft_ms: float | None = None
    schedule_tpot_ms: float | None = None
    best_static_tpot_ms: float | None = None

    def loss_sentence(self) -> str:
        return (
            f"at c={self.level} the schedule served {self.schedule_tok_s:.1f} tok/s, "
            f"{self.loss:.1%} below k={self.best_static_k}'s {self.best_static_tok_s:.1f} tok/s "
            "measured at that level"
        )

    def latencies(self) -> str:
        """Where the loss sits, for the operator to see: at c >= 4 on the two GPUs measured
        (RESULTS.md, issue 34) the schedule's median TTFT was 20-114 % above the best static
        k's and its median TPOT 3-20 %; a request's time split about evenly between the two
        (q27, c=8) or went mostly to TPOT (q8b, c=32), so both are named."""
        parts = [
            f"{name} {ours:.{digits}f} against {theirs:.{digits}f} ms"
            for name, ours, theirs, digits in (
                ("TTFT", self.schedule_ttft_ms, self.best_static_ttft_ms, 1),
                ("TPOT", self.schedule_tpot_ms, self.best_static_tpot_ms, 2),
            )
            if ours is not None and theirs is not None
        ]
        return f"median {', '.join(parts)}" if parts else ""


class ScheduleVerdict(BaseModel):
    """Accepted or refused, what the server keeps, and every level's numbers."""

    model_config = ConfigDict(frozen=True)

    accepted: bool
    kept: Literal["schedule", "single_k", "off"]
    k: int
    schedule: list[list[int]] | None
    max_loss: float
    worst_level: int | None
    worst_loss: float | None
    old_k: int
    levels: tuple[LevelVerdict, ...]
    sentence: str

    def playbook_fields(self) -> dict[str, object]:
        """The ``server`` keys the tuned playbook gets (schedule None: remove the key)."""
        return {"num_speculative_tokens": self.k, "speculative_schedule": self.schedule}

    def playbook_comment(self, when: str) -> str:
        """One YAML comment line, above the fields, saying what ``tune --load`` decided."""
        return f"# tune --load {when}: {self.sentence}"


def refusal_fallback(result: LoadResult, current_k: int) -> tuple[int, str]:
    """What a refused schedule keeps, and why: the single k that served the load mix best as
    measured. The model predicted the schedule and the verification just contradicted it, so its
    unlaunched single k is not trusted over a measured one (on an H100, q8b: the model's k=5 was
    never served; k=7 was, and led at c=4, 16 and 32). Without measured k at every level, the
    model's single k; without that, the k served before."""
    measured, predicted = result.measured_single_k, result.single_k
    if measured is not None:
        why = "best measured over the load mix"
        if predicted is not None and predicted.k != measured.k:
            why += f"; the model's k={predicted.k} was not launched"
        return measured.k, why
    if predicted is not None:
        return predicted.k, "best over the load mix, predicted"
    return current_k, "served before: no k scored at every level"


def judge_schedule(
    decision: ScheduleDecision,
    static_runs: Sequence[LevelRun],
    verify_runs: Sequence[LevelRun],
    *,
    old_k: int,
    fallback_k: int,
    fallback_why: str = "best over the load mix",
    levels: Sequence[int] | None = None,
    max_loss: float = MAX_LOSS,
) -> ScheduleVerdict:
    """Compare the schedule's bench (``verify_runs``) with the static benches, level by level.

    ``fallback_k`` is what a refusal keeps (``refusal_fallback``: the best single k
    over the load mix), ``fallback_why`` the words for it. ``levels`` default to every level the
    static runs measured.
    """
    if decision.kind != "schedule":
        raise TuneInputError(f"nothing to verify: {decision.sentence}", field="load")
    wanted = sorted(set(levels) if levels is not None else {run.level for run in static_runs})
    verdicts: list[LevelVerdict] = []
    unverified: list[int] = []
    for level in wanted:
        at_level = [run for run in verify_runs if run.level == level]
        if not at_level:
            unverified.append(level)
            continue
        verdicts.append(_level(at_level, decision, static_runs, old_k))
    worst = max(verdicts, key=lambda v: (v.loss, -v.level), default=None)
    schedule = decision.schedule.as_vllm()
    common = {"max_loss": max_loss, "old_k": old_k, "levels": tuple(verdicts)}
    worst_fields = {
        "worst_level": None if worst is None else worst.level,
        "worst_loss": None if worst is None else worst.loss,
    }
    kept_single = "off" if fallback_k == 0 else "single_k"
    keep_words = "speculation off" if fallback_k == 0 else f"the single k={fallback_k}"
    if unverified:
        return ScheduleVerdict(
            accepted=False,
            kept=kept_single,
            k=fallback_k,
            schedule=None,
            sentence=f"schedule refused: not measured at c={', c='.join(map(str, unverified))}; "
            f"kept {keep_words} ({fallback_why})",
            **common,
            **worst_fields,
        )
    assert worst is not None
    versus = _versus_old(verdicts, old_k)
    if worst.loss > max_loss:
        limit = "; ".join(filter(None, (f"limit {max_loss:.0%}", worst.latencies())))
        return ScheduleVerdict(
            accepted=False,
            kept=kept_single,
            k=fallback_k,
            schedule=None,
            sentence=f"schedule refused: {worst.loss_sentence()} ({limit}); kept "
            f"{keep_words} ({fallback_why}){versus}",
            **common,
            **worst_fields,
        )
    # + 0.0: a loss of exactly 0 prints as +0.0 %, not -0.0 %
    return ScheduleVerdict(
        accepted=True,
        kept="schedule",
        k=decision.k,
        schedule=schedule,
        sentence=f"schedule {schedule} kept: within {max_loss:.0%} of the best static k at "
        f"every level (worst c={worst.level}: {-worst.loss + 0.0:+.1%} against "
        f"k={worst.best_static_k}){versus}",
        **common,
        **worst_fields,
    )


def _level(
    verify: Sequence[LevelRun],
    decision: ScheduleDecision,
    static_runs: Sequence[LevelRun],
    old_k: int,
) -> LevelVerdict:
    level = verify[0].level
    measured = _mean(verify, "output_tok_s")
    # the engine picks k by the running batch, which a closed loop keeps near the level
    batch = max(1, round(_mean(verify, "batch")))
    at_k: dict[int, list[LevelRun]] = {}
    for run in static_runs:
        if run.level == level:
            at_k.setdefault(run.k, []).append(run)
    if not at_k:
        raise TuneInputError(f"no static k was measured at c={level}", field="load")
    static = {k: _mean(runs, "output_tok_s") for k, runs in at_k.items()}
    # the highest measured; a tie goes to the smaller k, as every choice in the tuner does
    best_k = min(static, key=lambda k: (-static[k], k))
    old = static.get(old_k)
    best_runs = at_k[best_k]
    return LevelVerdict(
        level=level,
        schedule_k=decision.schedule.k_at(batch),
        schedule_tok_s=measured,
        best_static_k=best_k,
        best_static_tok_s=static[best_k],
        loss=1.0 - measured / static[best_k],
        old_k_tok_s=old,
        vs_old=None if old is None else measured / old - 1.0,
        schedule_ttft_ms=mean_of(verify, "median_ttft_ms"),
        best_static_ttft_ms=mean_of(best_runs, "median_ttft_ms"),
        schedule_tpot_ms=mean_of(verify, "median_tpot_ms"),
        best_static_tpot_ms=mean_of(best_runs, "median_tpot_ms"),
    )


def _mean(runs: Sequence[LevelRun], field: RunField) -> float:
    """A field every run has (tok/s, the batch): its mean over runs known not to be empty."""
    mean = mean_of(runs, field)
    assert mean is not None, f"{field} of {len(runs)} runs"
    return mean


def _versus_old(verdicts: Sequence[LevelVerdict], old_k: int) -> str:
    compared = [v for v in verdicts if v.vs_old is not None]
    if not compared:
        return ""
    parts = ", ".join(f"{v.vs_old:+.1%} at c={v.level}" for v in compared if v.vs_old is not None)
    return f"; against the fixed old k={old_k}: {parts}"
