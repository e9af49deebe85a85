"""``compare NAME --methods none,dflash,ngram,draft_model``: one workload, one row per method.

Each method becomes a copy of the playbook that runs it (``playbook_for_method``), validated
like the file; a method the playbook cannot express (a checkpoint drafter other than the
playbook's own, or MTP on a playbook that does not run it) is skipped with the reason.
``run_compare`` is pure over injected ``launch(playbook)`` and ``bench(playbook, method) ->
BenchReport`` steps; ``compare_container`` wires the real ones, reading the playbook once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, ValidationError

from dflashops.bench.container import bench_container
from dflashops.bench.models import BenchReport, LevelResult
from dflashops.bench.settings import BenchSettings
from dflashops.errors import TuneInputError
from dflashops.inventory.load import Inventory
from dflashops.launch.core import launch
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Drafter, Method, Playbook
from dflashops.progress import Say, quiet
from dflashops.pydantic_errors import first_error_line

METHODS: tuple[str, ...] = get_args(Method)
# k for a speculative method when the playbook runs none (vLLM's n-gram examples use 4)
DEFAULT_K = 4

Launch = Callable[[Playbook], None]
Bench = Callable[[Playbook, str], BenchReport]


class MethodRow(BaseModel):
    """One method's measurement at its concurrency-1 level (else its first level)."""

    model_config = ConfigDict(frozen=True)

    method: str
    k: int | None
    concurrency: int
    output_tok_s: float
    mean_tpot_ms: float | None
    acceptance_length: float | None
    per_position_acceptance: tuple[float, ...] | None
    completed: int
    failed: int


class Skipped(BaseModel):
    model_config = ConfigDict(frozen=True)

    method: str
    reason: str


@dataclass
class CompareOutcome:
    rows: list[MethodRow]
    skipped: list[Skipped]
    reports: list[BenchReport] = field(default_factory=list)

    def section(self) -> dict[str, Any]:
        """The ``compare`` section of a BenchReport."""
        return {
            "rows": [row.model_dump(mode="json") for row in self.rows],
            "skipped": [item.model_dump(mode="json") for item in self.skipped],
            "levels": {
                row.method: report.model_dump(mode="json", include={"config", "levels"})
                for row, report in zip(self.rows, self.reports, strict=True)
            },
        }


def parse_methods(text: str) -> list[str]:
    methods = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise TuneInputError(
            f"unknown method {unknown[0]!r}" if unknown else "no methods",
            field="methods",
            hint=f"choose from {', '.join(METHODS)}",
        )
    return list(dict.fromkeys(methods))


def playbook_for_method(book: Playbook, method: str) -> Playbook | Skipped:
    """``book`` changed to run ``method`` (``book`` itself for its own method), or why it
    cannot: none turns speculation off, ngram drops the drafter model and keeps the playbook's k
    (``DEFAULT_K`` when it has none)."""
    own = book.drafter.method
    if method == own:
        return book
    if method not in ("none", "ngram"):
        what = "a drafter checkpoint" if method != "mtp" else "a target with MTP layers"
        return Skipped(
            method=method,
            reason=f"needs {what}; the playbook's drafter is {own} (compare it with a playbook "
            f"that runs {method})",
        )
    k = None if method == "none" else book.server.num_speculative_tokens or DEFAULT_K
    server = book.server.model_copy(update={"num_speculative_tokens": k})
    try:
        # validated as a whole, as the file is: a method switch must fit the rest of the book
        return Playbook.model_validate(
            {**dict(book), "drafter": Drafter(method=method), "server": server}
        )
    except ValidationError as exc:
        return Skipped(method=method, reason=f"the playbook cannot run it: {first_error_line(exc)}")


def row_from_report(method: str, report: BenchReport) -> MethodRow:
    level = report.level(1) or (report.levels[0] if report.levels else None)
    if level is None:
        raise TuneInputError(f"{method}: the bench measured no level", field="methods")
    return _row(method, report.config.num_speculative_tokens, level)


def _row(method: str, k: int | None, level: LevelResult) -> MethodRow:
    positions = level.spec_decode_per_position_acceptance_rates
    return MethodRow(
        method=method,
        k=k if method != "none" else None,
        concurrency=level.max_concurrency,
        output_tok_s=level.output_throughput,
        mean_tpot_ms=level.mean_tpot_ms,
        acceptance_length=level.spec_decode_acceptance_length,
        per_position_acceptance=tuple(positions) if positions else None,
        completed=level.completed,
        failed=level.failed,
    )


def run_compare(
    book: Playbook, methods: Sequence[str], launch: Launch, bench: Bench, say: Say | None = None
) -> CompareOutcome:
    """Launch and bench each expressible method in turn (the same bench settings for all)."""
    tell = say or quiet
    outcome = CompareOutcome(rows=[], skipped=[])
    for method in methods:
        at = playbook_for_method(book, method)
        if isinstance(at, Skipped):
            tell(f"{method}: skipped ({at.reason})")
            outcome.skipped.append(at)
            continue
        tell(f"{method}: launching")
        launch(at)
        tell(f"{method}: benchmarking")
        report = bench(at, method)
        outcome.reports.append(report)
        outcome.rows.append(row_from_report(method, report))
    return outcome


def compare_container(
    inventory: Inventory,
    container: str,
    playbook_path: Path,
    methods: Sequence[str],
    *,
    requests: int | None = None,
    say: Say | None = None,
) -> tuple[CompareOutcome, BenchReport | None]:
    """The real launch and bench; the last bench carries the ``compare`` section."""
    tell = say or quiet
    book = load_playbook(playbook_path)
    # the workload is read once: every method runs the same one
    base = BenchSettings.from_playbook(book, requests=requests)

    def launch_at(at: Playbook) -> None:
        launch(inventory, container, at, progress=tell)

    def bench_at(at: Playbook, method: str) -> BenchReport:
        settings = base.model_copy(update={"label": f"{container} {method}"})
        return bench_container(inventory, container, at, settings, progress=tell)

    outcome = run_compare(book, methods, launch_at, bench_at, tell)
    if not outcome.reports:
        return outcome, None
    last = outcome.reports[-1]
    return outcome, last.model_copy(
        update={"compare": outcome.section(), "label": f"{container} compare"}
    )
