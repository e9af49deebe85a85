"""k at the batch size the server runs, judged by the per-level model of ``tune NAME --load``.

``tune --load`` measured aggregate tok/s per (concurrency level, k) and saved the model in its
result's ``tune["load"]`` section (:mod:`dflashops.tune.load_section`): each level's running
batch, its k* and every k's tok/s (measured, else predicted). Under load the engine picks k per
step by the running batch (a schedule's ranges; one k without one), so doctor samples the batch
(``vllm:num_requests_running`` over its window), looks up the k served at the median busy batch,
and reads the model at the level whose batch is nearest (in ratio: levels double). When that k
scores more than :data:`~dflashops.tune.load_verdict.MAX_LOSS` below k* there (the loss that
refuses a schedule in ``tune --load``), or misses the objective's TPOT limit where k* meets it,
the finding names the loss and what ``tune --load`` kept (its schedule, else its single k).

The model decides only where it covers the batch; without one, without a busy batch, or with
one measured on another engine release, the concurrency-1 rule (:mod:`.rules_tune`) decides and
:class:`LoadJudgement` says why (and how to get a model).

``gather`` fills the facts: :meth:`~.facts.RunningBatch.from_scrapes` over the window's
scrapes, :func:`find_load_model` over the saved results.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dflashops.bench.models import BenchReport
from dflashops.doctor.facts import DoctorFacts, LoadModel
from dflashops.doctor.findings import Finding
from dflashops.doctor.rules import RuleResult, ok
from dflashops.errors import DflashopsError
from dflashops.playbook.schedule import VLLM_FIELD
from dflashops.tune.load_verdict import MAX_LOSS

# the model reads a batch at most this far (as a ratio) past its smallest or largest level
COVERAGE = 2.0
# saved results read, newest first, looking for one with a load section
MAX_RESULTS_READ = 20


@dataclass(frozen=True)
class LoadJudgement:
    """``result``: the model covers the batch, and this is the tune rule's answer. Else ``note``
    says why it does not decide (empty: nothing worth saying) for the concurrency-1 rule."""

    result: RuleResult | None = None
    note: str = ""


@dataclass(frozen=True)
class _Level:
    level: int
    batch: float
    best_k: int
    rows: dict[int, Mapping[str, Any]]

    def _value(self, k: int, key: str) -> Any:
        row = self.rows.get(k)
        return None if row is None else row.get(key)

    def tok_s(self, k: int) -> float | None:
        value = self._value(k, "tok_s")
        return float(value) if isinstance(value, int | float) and value > 0 else None

    def meets_slo(self, k: int) -> bool | None:
        value = self._value(k, "meets_slo")
        return value if isinstance(value, bool) else None

    def measured(self, k: int) -> bool:
        return isinstance(self._value(k, "measured_tok_s"), int | float)


@dataclass(frozen=True)
class _Kept:
    """What ``tune --load`` left the server on: its schedule (vLLM's form) or one k."""

    k: int
    schedule: list[list[int]] | None
    sentence: str
    verified: bool

    def k_at(self, batch: int) -> int:
        return self.k if self.schedule is None else schedule_k_at(self.schedule, batch, self.k)

    def words(self) -> str:
        if self.schedule is not None:
            return f"the schedule {_compact(self.schedule)}"
        return k_words(self.k)


@dataclass(frozen=True)
class _Model:
    levels: tuple[_Level, ...]
    kept: _Kept
    objective: str
    level_list: tuple[int, ...]
    warnings: tuple[str, ...] = ()


def k_words(k: int) -> str:
    return "speculation off" if k == 0 else f"k={k}"


def schedule_k_at(schedule: Sequence[Sequence[int]], batch: int, cap: int | None) -> int:
    """vLLM's k at ``batch``: the last range starting at or below it (a gap and the tail carry
    the previous k forward), capped at ``num_speculative_tokens``."""
    k = 0
    for start, _end, value in sorted((int(a), int(b), int(c)) for a, b, c in schedule):
        if start > batch:
            break
        k = value
    return min(k, cap) if cap is not None else k


def judge_load(facts: DoctorFacts) -> LoadJudgement:
    """The per-level model's verdict on the k served at the measured batch (module doc)."""
    batch = facts.running_batch.median if facts.running_batch is not None else None
    found = facts.load_model
    if found is None:
        if batch is None or batch < 2:
            return LoadJudgement()
        levels = ",".join(str(level) for level in _ladder(batch))
        return LoadJudgement(
            note=f"the server ran at batch ~{batch:g} (median over the window), and this model "
            f"is one request's: `dflashops tune {facts.container} --load {levels}` measures k "
            "per batch size, and doctor then judges k at the batch it sees"
        )
    try:
        model = _parse(found.section)
    except (KeyError, TypeError, ValueError) as exc:
        return LoadJudgement(note=f"{found.source}: no per-level model doctor reads ({exc})")
    again = f"dflashops tune {facts.container} --load {_levels(model.level_list)}"
    if (
        found.engine_version
        and facts.engine_version
        and (found.engine_version, found.engine) != (facts.engine_version, facts.engine)
    ):
        return LoadJudgement(
            note=f"the tune --load model ({found.source}) was measured on "
            f"{found.engine}=={found.engine_version}, the server runs "
            f"{facts.engine}=={facts.engine_version}: `{again}` measures it again"
        )
    if batch is None:
        return LoadJudgement(
            note=f"a tune --load model ({found.source}) is there, but the server ran no request "
            "over the window: no batch size to judge k at"
        )
    return _judge(facts, found, model, batch, again)


def _judge(
    facts: DoctorFacts, found: LoadModel, model: _Model, batch: float, again: str
) -> LoadJudgement:
    container = facts.container
    smallest, largest = model.levels[0], model.levels[-1]
    if batch > largest.batch * COVERAGE or batch < smallest.batch / COVERAGE:
        wider = sorted({*model.level_list, *_ladder(batch)})
        return LoadJudgement(
            note=f"the server ran at batch ~{batch:g}, outside what the tune --load model "
            f"measured (batch {smallest.batch:g}..{largest.batch:g}, {found.source}): "
            f"`dflashops tune {container} --load {_levels(wider)}` measures it"
        )
    at = max(1, round(batch))
    level = min(model.levels, key=lambda item: (abs(math.log(batch / item.batch)), item.level))
    served_k, served_words, served_schedule = _served(facts, at)
    served_tok, best_tok = level.tok_s(served_k), level.tok_s(level.best_k)
    if served_tok is None or best_tok is None:
        return LoadJudgement(
            note=f"the tune --load model has no score for {k_words(served_k)} at c={level.level} "
            f"({found.source}): `{again}` with --k-min/--k-max around it measures it"
        )
    loss = 1.0 - served_tok / best_tok
    slo_miss = level.meets_slo(served_k) is False and level.meets_slo(level.best_k) is True
    where_c = f"c={level.level}"
    where = f"{where_c} (batch {level.batch:g})"
    best_words = k_words(level.best_k)
    if loss <= MAX_LOSS and not slo_miss:
        return LoadJudgement(
            result=ok(
                f"{k_words(served_k)} at running batch {at} is within {MAX_LOSS:.0%} of the "
                f"tune --load model's best at {where}, {best_words} ({-loss + 0.0:+.1%})"
            )
        )
    kept = model.kept
    lost = f"{loss:.1%} below" if loss > 0 else f"{-loss:.1%} above"
    if _same(kept, served_k, served_schedule):
        return LoadJudgement(
            result=ok(
                f"{k_words(served_k)} at running batch {at} is {lost} the tune --load model's "
                f"best at {where}, {best_words}, and it is what tune --load kept: "
                f"{kept.sentence}"
            )
        )
    kept_k = kept.k_at(at)
    kept_tok = level.tok_s(kept_k)
    helps = kept_tok is not None and (kept_tok > served_tok or slo_miss)
    evidence = [
        f"running batch {at} ({_batch_source(facts)})",
        f"served: {served_words}",
        f"tune --load model ({found.source}), at {where}: {best_words} "
        f"{best_tok:.1f} tok/s{_how(level, level.best_k)}, {k_words(served_k)} "
        f"{served_tok:.1f} tok/s{_how(level, served_k)}: {lost}",
    ]
    if slo_miss:
        evidence.append(f"{k_words(served_k)} misses the TPOT limit of {model.objective}")
    if kept_tok is not None and helps:
        at_batch = f": {k_words(kept_k)} at batch {at}" if kept.schedule is not None else ""
        evidence.append(
            f"tune --load kept {kept.words()}{'' if kept.verified else ' (not verified)'}"
            f"{at_batch}, {kept_tok:.1f} tok/s{_how(level, kept_k)} at c={level.level}"
        )
    evidence.extend(
        f"model warning: {text}" for text in model.warnings if text.startswith(f"{where_c}:")
    )
    serve = _serve(container, kept, served_schedule is not None)
    fix = f"{serve}; `{again}` measures again" if helps else again
    what = (
        f"missing the TPOT limit that {best_words} meets"
        if slo_miss and loss <= MAX_LOSS
        else f"{loss:.0%} below {best_words}"
    )
    title = (
        f"at running batch {at} the server runs {k_words(served_k)}, {what} "
        f"(the tune --load model at c={level.level})" + (f": serve {kept.words()}" if helps else "")
    )
    details: dict[str, Any] = {
        "running_batch": batch,
        "level": level.level,
        "level_batch": level.batch,
        "served_k": served_k,
        "served_schedule": served_schedule,
        "best_k": level.best_k,
        "served_tok_s": served_tok,
        "best_tok_s": best_tok,
        "predicted_loss": loss,
        "model": found.source,
        "kept_k": kept.k,
        "kept_schedule": kept.schedule,
    }
    finding = Finding(
        rule="tune",
        severity="warning",
        title=title,
        evidence=tuple(evidence),
        fix=fix,
        impact=min(1.0, loss) if loss > 0 else None,
        details=details,
    )
    return LoadJudgement(result=RuleResult([finding]))


def _served(facts: DoctorFacts, batch: int) -> tuple[int, str, list[list[int]] | None]:
    """The k the server runs at ``batch``, in words, and its schedule (None: one k)."""
    config = facts.speculative_config
    if config is None:
        return 0, "speculation off (no speculative config)", None
    k = facts.k or 0
    raw = config.get(VLLM_FIELD)
    if isinstance(raw, list) and raw:
        try:
            schedule = [[int(a), int(b), int(c)] for a, b, c in raw]
        except (TypeError, ValueError):
            schedule = None
        if schedule is not None:
            at = schedule_k_at(schedule, batch, k)
            words = f"{VLLM_FIELD} {_compact(schedule)} (num_speculative_tokens {k}): "
            return at, words + f"{k_words(at)} at batch {batch}", schedule
    return k, f"num_speculative_tokens {k}, no schedule: {k_words(k)} at every batch size", None


def _same(kept: _Kept, k: int, schedule: list[list[int]] | None) -> bool:
    if kept.schedule is not None or schedule is not None:
        return kept.schedule == schedule
    return kept.k == k


def _serve(container: str, kept: _Kept, has_schedule: bool) -> str:
    launch = f"dflashops launch {container}"
    if kept.schedule is not None:
        largest = max(entry[2] for entry in kept.schedule)
        return (
            f"`{launch} --set server.num_speculative_tokens={largest} "
            f"--set 'server.speculative_schedule={_compact(kept.schedule)}'` (or set both in "
            "the playbook)"
        )
    if kept.k == 0:
        return f"set drafter.method: none in the playbook and `{launch}`"
    drop = " --set server.speculative_schedule=null" if has_schedule else ""
    return (
        f"`{launch} --set server.num_speculative_tokens={kept.k}{drop}` (or set it in the playbook)"
    )


def _how(level: _Level, k: int) -> str:
    return " measured" if level.measured(k) else " predicted"


def _batch_source(facts: DoctorFacts) -> str:
    sampled = facts.running_batch
    if sampled is None:
        return "not sampled"
    busy = sampled.busy
    idle = len(sampled.samples) - len(busy)
    spread = f"{min(busy):g}-{max(busy):g}" if busy and min(busy) != max(busy) else ""
    parts = [f"median of {len(busy)} busy sample(s)", spread, f"{idle} idle" if idle else ""]
    return ", ".join(part for part in parts if part) + f"; {sampled.source}"


def _compact(schedule: Sequence[Sequence[int]]) -> str:
    return json.dumps([list(entry) for entry in schedule], separators=(",", ":"))


def _levels(levels: Sequence[int]) -> str:
    return ",".join(str(level) for level in levels)


def _ladder(batch: float) -> list[int]:
    """1, 2, 4, … up to the first power of two at or above ``batch``."""
    return [2**i for i in range(math.ceil(math.log2(max(1.0, batch))) + 1)]


def _parse(section: Mapping[str, Any]) -> _Model:
    """The parts of a ``tune["load"]`` section the rule reads; KeyError/TypeError/ValueError
    when one is missing or of another shape."""
    k_by_level = {int(level): int(k) for level, k in section["k_by_level"].items()}
    rows: dict[int, dict[int, Mapping[str, Any]]] = {}
    batches: dict[int, float] = {}
    for row in section["predictions"]:
        level = int(row["level"])
        rows.setdefault(level, {})[int(row["k"])] = row
        batches[level] = float(row.get("batch") or level)
    if not rows:
        raise ValueError("no predictions")
    levels = tuple(
        _Level(
            level=level,
            batch=batches[level],
            best_k=k_by_level[level],
            rows=rows[level],
        )
        for level in sorted(rows, key=lambda item: (batches[item], item))
    )
    return _Model(
        levels=levels,
        kept=_kept(section),
        objective=str(section.get("objective") or "aggregate output tok/s"),
        level_list=tuple(int(level) for level in section.get("levels") or sorted(rows)),
        warnings=tuple(str(text) for text in section.get("warnings") or ()),
    )


def _kept(section: Mapping[str, Any]) -> _Kept:
    """The verdict on the verified schedule, else the decision (one k is benched as it is)."""
    verdict, decision = section.get("verdict"), section["decision"]
    scheduled = decision["kind"] == "schedule"
    kept = verdict if isinstance(verdict, Mapping) else decision
    schedule = kept.get("schedule") if kept is verdict or scheduled else None
    return _Kept(
        k=int(kept["k"]),
        schedule=[[int(v) for v in entry] for entry in schedule] if schedule else None,
        sentence=str(kept.get("sentence") or ""),
        verified=kept is verdict or not scheduled,
    )


# --- what gather calls --------------------------------------------------------------------------


def find_load_model(container: str, folder: Path) -> tuple[LoadModel | None, str]:
    """The newest ``tune-<container>-*.json`` in ``folder`` (where ``tune`` saves by default)
    with a ``tune["load"]`` section for this container, and a note when none was found."""
    try:
        files = sorted(
            folder.glob(f"tune-{container}-*.json"), key=lambda p: p.stat().st_mtime, reverse=True
        )
    except OSError as exc:
        return None, f"{folder}: not read ({exc.strerror or exc})"
    for path in files[:MAX_RESULTS_READ]:
        try:
            report = BenchReport.load(path)
        except (DflashopsError, OSError):
            continue
        section = (report.tune or {}).get("load")
        if not isinstance(section, dict) or report.config.container not in (None, container):
            continue
        return (
            LoadModel(
                section=section,
                source=str(path),
                engine=report.config.engine,
                engine_version=report.config.engine_version,
                created_at=report.created_at.isoformat(),
            ),
            "",
        )
    return None, f"no `tune {container} --load` result in {folder} (tune-{container}-*.json)"
