"""``tune --load`` against served configurations: the driving logic of ``gpu_load.py`` (issue 34).

Everything here runs over one injected step, ``serve(served) -> record``: start the server on one
k (0: speculation off) or one schedule ``[[start, end, k], ...]``, bench every level, stop it,
and return what the bench reported. On the H200 that step is ``gpu_load_device.DeviceServer``;
``gpu_load_selfcheck`` and ``gpu_load.py plan`` give it a canned machine instead.

What the driver does with it:

1. the product's own loop, :func:`dflashops.tune.live_load.run_load_tune` (budget 4, levels
   1..32): its ``launch`` is lazy and its ``measure`` serves and benches; every served
   configuration is measured once and kept in a :class:`Store` (a record per configuration,
   written after every launch), so a run cut by the deadline of one device call replays the loop
   from the store in the next call and carries on where it stopped;
2. every static k of ``static_ks`` not measured by the loop, so the best static k at every level
   is measured, not predicted (the tuner only saw its own probes);
3. the criterion: at every level, the configuration the tuner leaves serving (the verified
   schedule, or the single k a refusal keeps) against the best static k measured at that level
   (``MIN_RATIO`` 0.97), and the levels where k = 0 is the best measured.

A record whose server did not come up or whose bench failed is kept with its error (the loop
stops there, the static sweep goes on). A launch the deadline cut is not kept: it runs again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dflashops.bench.models import BenchReport
from dflashops.errors import TuneInputError
from dflashops.tune.acceptance import AcceptanceCurve
from dflashops.tune.live_load import LoadTuneOutcome, Served, run_load_tune
from dflashops.tune.load_plan import LoadTunePlan
from dflashops.tune.load_runs import LevelRun, level_runs_from_report
from dflashops.tune.load_settings import LoadSettings
from dflashops.tune.load_verdict import MAX_LOSS
from dflashops.tune.runs import curve_from_runs

LEVELS = (1, 2, 4, 8, 16, 32)
# the concurrency-1 sweep of issue 22 (k = 1, 2, 4, 8, 15) and speculation off
STATIC_KS = (0, 1, 2, 4, 8, 15)
MIN_RATIO = 0.97  # the criterion: the served schedule against the best static k
MIN_REQUESTS = 16  # per level; at least 2 x the level, as tune --load's own bench

Record = dict[str, Any]
ServeStep = Callable[[Served], Record]
TimeCheck = Callable[[Served], None]
Tell = Callable[[str], None]


class OutOfTime(Exception):
    """The next launch does not fit before the deadline (or the deadline cut it)."""

    def __init__(self, served: Served, need_s: float, left_s: float) -> None:
        super().__init__(f"{describe(served)} needs ~{need_s:.0f} s, {left_s:.0f} s left")
        self.served, self.need_s, self.left_s = served, need_s, left_s


class ServeFailed(Exception):
    """A served configuration gave no usable level runs (server or bench failure)."""


def served_key(served: Served) -> str:
    """``k15``, ``k0``, ``schedule-1-12-15_13-64-6``: a record's name and folder name."""
    if isinstance(served, int):
        return f"k{served}"
    return "schedule-" + "_".join(f"{a}-{b}-{k}" for a, b, k in served)


def describe(served: Served) -> str:
    if isinstance(served, int):
        return "speculation off (k=0)" if served == 0 else f"k={served}"
    return f"schedule {served}"


def max_k(served: Served) -> int:
    return served if isinstance(served, int) else max(entry[2] for entry in served)


def k_at(served: Served, batch: int) -> int:
    """The k a configuration runs at a batch size (vLLM carries the last range's k past it)."""
    if isinstance(served, int):
        return served
    for start, end, k in served:
        if start <= batch <= end:
            return k
    return served[-1][2]


def requests_per_level(levels: Sequence[int], min_requests: int) -> dict[int, int]:
    """Requests per level: at least two per concurrent slot (``tune --load``'s rule)."""
    return {level: max(2 * level, min_requests) for level in levels}


def level_groups(per_level: dict[int, int]) -> list[tuple[tuple[int, ...], int]]:
    """Consecutive levels that run the same number of requests: one bench call each."""
    groups: list[tuple[tuple[int, ...], int]] = []
    for level, n in sorted(per_level.items()):
        if groups and groups[-1][1] == n:
            groups[-1] = ((*groups[-1][0], level), n)
        else:
            groups.append(((level,), n))
    return groups


@dataclass
class Store:
    """One record per served configuration, on disk after every launch (``path`` None: memory)."""

    path: Path | None = None
    records: dict[str, Record] = field(default_factory=dict)

    @classmethod
    def open(
        cls, path: Path | None, resume_from: Sequence[Path] = (), *, retry_failed: bool = False
    ) -> Store:
        store = cls(path)
        sources = [*resume_from, *([path] if path is not None and path.exists() else [])]
        for source in sources:
            data = json.loads(source.read_text(encoding="utf-8"))
            for key, record in dict(data.get("records", {})).items():
                store.records[key] = record
        if retry_failed:
            store.records = {k: r for k, r in store.records.items() if not r.get("error")}
        return store

    def save(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"records": self.records}, indent=1), encoding="utf-8")
        tmp.replace(self.path)


def runs_of(record: Record) -> list[LevelRun]:
    """The level runs of one record (one per level, ascending), or ServeFailed."""
    key = served_key(record["served"])
    if record.get("error"):
        raise ServeFailed(f"{key}: {record['error']}")
    runs: list[LevelRun] = []
    try:
        for data in record.get("reports", []):
            runs += level_runs_from_report(BenchReport.model_validate(data), key)
    except TuneInputError as exc:
        raise ServeFailed(f"{key}: {exc.message}") from exc
    if not runs:
        raise ServeFailed(f"{key}: no level was measured")
    return sorted(runs, key=lambda run: run.level)


@dataclass(frozen=True)
class LoadBenchConfig:
    """What is measured and how the tuner is set (the product's defaults, levels 1..32)."""

    model: str
    levels: tuple[int, ...] = LEVELS
    budget: int = 4
    current_k: int = 15
    static_ks: tuple[int, ...] = STATIC_KS
    max_num_seqs: int = 64
    engine: str = "vllm"
    version: str = "0.26.0"
    min_ratio: float = MIN_RATIO
    min_requests: int = MIN_REQUESTS

    def plan(self) -> LoadTunePlan:
        return LoadTunePlan(
            settings=LoadSettings(levels=self.levels), budget=self.budget, current_k=self.current_k
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "levels": list(self.levels),
            "budget": self.budget,
            "current_k": self.current_k,
            "static_ks": list(self.static_ks),
            "max_num_seqs": self.max_num_seqs,
            "engine": f"{self.engine} {self.version}",
            "min_ratio": self.min_ratio,
            "max_loss": MAX_LOSS,
            "requests_per_level": requests_per_level(self.levels, self.min_requests),
        }


class LoadBench:
    """The driver: the tune loop over the store, then the static sweep, then the criterion."""

    def __init__(
        self,
        config: LoadBenchConfig,
        store: Store,
        serve: ServeStep,
        check_time: TimeCheck,
        tell: Tell,
        *,
        after_record: Callable[[Record], object] | None = None,
    ) -> None:
        self.config, self.store, self.serve, self.check_time = config, store, serve, check_time
        self.tell, self.after_record = tell, after_record
        self.fresh: list[str] = []  # configurations served by this process, in order
        self.launch_calls: list[Served] = []  # what the loop asked to launch, in order

    def launch(self, served: Served) -> None:
        """Lazy: the server starts in ``measure``; a launch never measured (the loop's last
        "leave the kept configuration serving") starts nothing here."""
        self.launch_calls.append(served)

    def measure(self, served: Served) -> list[LevelRun]:
        key = served_key(served)
        record = self.store.records.get(key)
        if record is None:
            self.check_time(served)  # OutOfTime: nothing is started
            self.tell(f"serve {describe(served)}")
            record = self.serve(served)  # OutOfTime when the deadline cut it: not kept
            record["served"] = served
            record["seq"] = len(self.store.records) + 1
            record["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
            self.store.records[key] = record
            self.store.save()
            self.fresh.append(key)
            if self.after_record is not None:  # a call killed later still returns this much
                self.after_record(self.result(None, None, {"next": None, "need_s": 0, "left_s": 0}))
        else:
            self.tell(f"{describe(served)}: measured before (record {key})")
        return runs_of(record)

    def run(self) -> Record:
        """Everything that fits: the result so far (``incomplete`` says what is left)."""
        outcome: LoadTuneOutcome | None = None
        tune_error: str | None = None
        incomplete: dict[str, Any] | None = None
        try:
            outcome = run_load_tune(
                self.config.plan(),
                self.launch,
                self.measure,
                self.tell,
                engine=self.config.engine,
                version=self.config.version,
                max_num_seqs=self.config.max_num_seqs,
            )
        except ServeFailed as exc:
            tune_error = str(exc)
            self.tell(f"tune stopped: {tune_error}")
        except OutOfTime as exc:
            incomplete = {"next": exc.served, "need_s": exc.need_s, "left_s": exc.left_s}
        if incomplete is None:
            for k in static_order(self.config.static_ks, outcome):
                try:
                    self.measure(k)
                except ServeFailed as exc:
                    self.tell(f"static k={k} failed: {exc}")
                except OutOfTime as exc:
                    incomplete = {"next": exc.served, "need_s": exc.need_s, "left_s": exc.left_s}
                    break
        if incomplete is not None:
            self.tell(f"out of time: {describe(incomplete['next'])} is next; call again")
        return self.result(outcome, tune_error, incomplete)

    def result(
        self,
        outcome: LoadTuneOutcome | None,
        tune_error: str | None,
        incomplete: dict[str, Any] | None,
    ) -> Record:
        config = self.config
        tune: dict[str, Any] | None = None
        if outcome is not None:
            tune = {
                "sentence": outcome.sentence,
                "launches": outcome.launches,
                "kept_k": outcome.kept_k,
                "kept_schedule": outcome.kept_schedule,
                "section": outcome.section(),
            }
        done = incomplete is None
        return {
            "kind": "dflashops-gpu-load",
            "model": config.model,
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "config": config.as_dict(),
            "complete": done,
            "incomplete": incomplete,
            "served_this_call": self.fresh,
            "loop_launches": self.launch_calls,
            "tune": tune,
            "tune_error": tune_error,
            "criterion": criterion(config, self.store.records, outcome),
            "records": self.store.records,
        }


def static_order(ks: Sequence[int], outcome: LoadTuneOutcome | None) -> list[int]:
    """The static sweep's order: first the k the tuner's model puts closest to some level's best
    (a call cut short has measured the likeliest best static k first), ties to the smaller k."""
    if outcome is None:
        return list(ks)
    result = outcome.result

    def closeness(k: int) -> float:
        shares = [
            (result.score(choice.level, k) or 0.0) / choice.best_tok_s
            for choice in result.levels
            if choice.best_tok_s > 0
        ]
        return max(shares, default=0.0)

    return sorted(ks, key=lambda k: (-closeness(k), k))


def _static_runs(records: dict[str, Record]) -> dict[int, dict[int, LevelRun]]:
    """Static k → level → run, over every record that measured (errors left out)."""
    out: dict[int, dict[int, LevelRun]] = {}
    for record in records.values():
        served = record["served"]
        if not isinstance(served, int):
            continue
        try:
            out[served] = {run.level: run for run in runs_of(record)}
        except ServeFailed:
            continue
    return out


def pooled_curve(static: dict[int, dict[int, LevelRun]]) -> AcceptanceCurve | None:
    """Per-position acceptance pooled over every speculative level run (drafts-weighted)."""
    runs = [
        run.tune_run() for k, by in static.items() if k for run in by.values() if run.acceptance
    ]
    if not runs:
        return None
    try:
        return curve_from_runs(runs)
    except TuneInputError:
        return None


def normalized(run: LevelRun, k: int, curve: AcceptanceCurve | None) -> float:
    """tok/s at the pooled acceptance: the synthetic sampler's draw of this level divided out
    (its tokens per step against the pooled curve's at ``k``), leaving the step time."""
    own = run.acceptance_length
    if curve is None or k == 0 or own is None or own <= 0:
        return run.output_tok_s
    return run.output_tok_s * curve.tokens_per_step(k) / own


def _best(rows: dict[int, float]) -> int:
    return min(rows, key=lambda k: (-rows[k], k))  # ties to the smaller k, as the tuner


def criterion(
    config: LoadBenchConfig, records: dict[str, Record], outcome: LoadTuneOutcome | None
) -> dict[str, Any]:
    """Per level: the best static k measured, what the tuner serves and the schedule it verified,
    their ratios (measured, and at the pooled acceptance), and where k = 0 wins."""
    static = _static_runs(records)
    curve = pooled_curve(static)
    served: Served | None = None
    served_runs: dict[int, LevelRun] = {}
    schedule: list[list[int]] | None = None
    schedule_runs: dict[int, LevelRun] = {}
    if outcome is not None:
        served = outcome.kept_schedule or outcome.kept_k
        if outcome.verify_runs:
            schedule = outcome.decision.schedule.as_vllm()
            schedule_runs = {run.level: run for run in outcome.verify_runs}
        served_runs = schedule_runs if outcome.kept_schedule else static.get(outcome.kept_k, {})
    rows: list[dict[str, Any]] = []
    for level in config.levels:
        at = {k: by[level] for k, by in sorted(static.items()) if level in by}
        if not at:
            continue
        raw = {k: run.output_tok_s for k, run in at.items()}
        norm = {k: normalized(run, k, curve) for k, run in at.items()}
        best_k, best_norm_k = _best(raw), _best(norm)
        row: dict[str, Any] = {
            "level": level,
            "static_tok_s": {str(k): round(v, 2) for k, v in raw.items()},
            "static_acceptance_length": {
                str(k): run.acceptance_length for k, run in at.items() if k
            },
            "best_static_k": best_k,
            "best_static_tok_s": round(raw[best_k], 2),
            "best_static_k_normalized": best_norm_k,
            "k0_best": best_k == 0 if 0 in raw else None,
        }
        for name, runs, what in (("served", served_runs, served), ("schedule", schedule_runs,
                                                                     schedule)):  # fmt: skip
            run = runs.get(level)
            if run is None or what is None:
                continue
            k = k_at(what, level)
            row[name] = {
                "k_at_level": k,
                "tok_s": round(run.output_tok_s, 2),
                "ratio": round(run.output_tok_s / raw[best_k], 4),
                "ratio_normalized": round(normalized(run, k, curve) / norm[best_norm_k], 4),
                "acceptance_length": run.acceptance_length,
                "drafted_per_draft": run.drafted_per_draft,
            }
        rows.append(row)
    measured = [row for row in rows if "served" in row]
    met = [row["served"]["ratio"] >= config.min_ratio for row in measured]
    missing = [level for level in config.levels if level not in {r["level"] for r in measured}]
    k0_wins = [row["level"] for row in rows if row["k0_best"]]
    tuned = outcome.result.stops_paying_at if outcome is not None else None
    return {
        "min_ratio": config.min_ratio,
        "served": served,
        "schedule_verified": schedule,
        "levels": rows,
        "met": bool(measured) and all(met) and not missing,
        "failing_levels": [r["level"] for r, ok in zip(measured, met, strict=True) if not ok],
        "levels_not_measured": missing,
        "k0_wins_at": k0_wins,
        "k0_first_win": k0_wins[0] if k0_wins else None,
        "tuner_stops_paying_at": tuned,
        "static_ks_measured": sorted(static),
        "pooled_acceptance": None if curve is None else list(curve.rates),
    }


def summary_text(result: Record, title: str = "") -> str:
    """The short text summary: launches, the tuner's sentence, the table, the findings."""
    crit = result["criterion"]
    config = result["config"]
    lines = [
        f"tune --load on {_gpu(result)}: {title or result['model']} ({config['engine']}), "
        f"levels {', '.join(map(str, config['levels']))}, budget {config['budget']}, "
        f"current k {config['current_k']}",
    ]
    order = sorted(result["records"].values(), key=lambda r: r.get("seq", 0))
    parts = []
    for record in order:
        started = record.get("start_s")
        error = str(record.get("error") or "").split(";")[0][:120]
        parts.append(
            f"{served_key(record['served'])}"
            + (f" [healthy in {started:.0f} s]" if started and not error else "")
            + (f" ({error})" if error else "")
        )
    lines.append("served, in order: " + (", ".join(parts) or "nothing yet"))
    tune = result.get("tune")
    if tune:
        lines.append(f"tune: {' '.join(str(tune['sentence']).split())}")
    if result.get("tune_error"):
        lines.append(f"tune stopped: {result['tune_error']}")
    header = (
        "c    best static k (tok/s)   served (k at c)      drafted/step  ratio      at pooled acc."
    )
    lines += ["", f"served: {crit['served']}", header]
    for row in crit["levels"]:
        served = row.get("served")
        best = f"k={row['best_static_k']} ({row['best_static_tok_s']:.1f})"
        got, drafted, ratio, norm = "-", "-", "-", "-"
        if served:
            got = f"{served['tok_s']:.1f} (k={served['k_at_level']})"
            if served["drafted_per_draft"] is not None:
                drafted = f"{served['drafted_per_draft']:.2f}"
            ok = served["ratio"] >= crit["min_ratio"]
            ratio = f"{served['ratio']:.3f} " + ("ok" if ok else "LOW")
            norm = f"{served['ratio_normalized']:.3f}"
        lines.append(f"{row['level']:<4} {best:<23} {got:<20} {drafted:<13} {ratio:<10} {norm}")
    sched_rows = [row for row in crit["levels"] if "schedule" in row]
    if sched_rows and crit["schedule_verified"] != crit["served"]:
        lines.append(f"the schedule {crit['schedule_verified']} as verified (refused):")
        lines += [
            f"  c={row['level']}: {row['schedule']['tok_s']:.1f} tok/s at k="
            f"{row['schedule']['k_at_level']}, {row['schedule']['ratio']:.3f} of the best static"
            for row in sched_rows
        ]
    lines += static_table(crit)
    lines.append("")
    if crit["levels_not_measured"]:
        lines.append(f"not measured yet at c={crit['levels_not_measured']}")
    verdict = "met" if crit["met"] else "NOT met"
    if crit["failing_levels"]:
        verdict += f" (below {crit['min_ratio']} at c={crit['failing_levels']})"
    lines.append(f">= {crit['min_ratio']} of the best static k at every level: {verdict}")
    k0 = crit["k0_first_win"]
    lines.append(
        "k = 0 wins: "
        + (f"from c={k0} (measured best at c={crit['k0_wins_at']})" if k0 else "at no level")
        + f"; the tuner's model: stops paying at {crit['tuner_stops_paying_at']}"
    )
    if not result["complete"] and result["incomplete"]["next"] is None:
        lines.append("PARTIAL: written after a launch while the call was still running")
    elif not result["complete"]:
        nxt = result["incomplete"]
        lines.append(
            f"INCOMPLETE: next {describe(nxt['next'])} (~{nxt['need_s']:.0f} s, "
            f"{nxt['left_s']:.0f} s were left): run the same command again"
        )
    return "\n".join(lines) + "\n"


def card_name(facts: dict[str, Any]) -> str | None:
    """The card the facts name: the first field of nvidia-smi's CSV row (its line 2)."""
    lines = str(facts.get("nvidia_smi", "")).splitlines()
    name = lines[1].split(",")[0].strip() if len(lines) > 1 else ""
    return name or None


def _gpu(result: Record) -> str:
    return card_name(result.get("facts", {})) or "the H200"


def static_table(crit: dict[str, Any]) -> list[str]:
    """Every static k measured, per level: tok/s and the acceptance length the level drew."""
    ks = crit["static_ks_measured"]
    if not ks:
        return []
    lines = ["", "static k, measured tok/s (acceptance length):"]
    lines.append("c    " + "".join(f"{'k=' + str(k):<17}" for k in ks))
    for row in crit["levels"]:
        cells = []
        for k in ks:
            tok = row["static_tok_s"].get(str(k))
            acc = row["static_acceptance_length"].get(str(k))
            cell = "-" if tok is None else f"{tok:.1f}" + (f" ({acc:.2f})" if acc else "")
            cells.append(f"{cell:<17}")
        lines.append(f"{row['level']:<4} " + "".join(cells).rstrip())
    return lines
