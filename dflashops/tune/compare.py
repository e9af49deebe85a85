"""``compare NAME --methods none,dflash,ngram,draft_model [--engines vllm,sglang==X]``: one
workload, one row per engine and method.

Each engine becomes the playbook loaded with ``engine.name``/``engine.version`` set (and its own
k from ``--k ENGINE=K``), validated like the file, so a ``{engine}``/``{version}`` base venv and
every engine/method/release rule follow; each method then a copy of that playbook that runs it
(``playbook_for_method``). What cannot be expressed (a checkpoint drafter other than the
playbook's own, MTP on a playbook that does not run it, a method the engine release lacks) is
skipped with the reason. An engine that cannot run the playbook's own method (SGLang's DFlash
on a CPU, a release without it) still runs the methods that need no checkpoint (none, n-gram):
:class:`WithoutOwnMethod`. ``run_compare`` is pure over injected ``launch(playbook)`` and
``bench(playbook, method) -> BenchReport`` steps; ``compare_container`` wires the real ones.
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
from dflashops.bench.stopped import WarmupRefused
from dflashops.errors import BenchmarkError, DflashopsError, PlaybookError, TuneInputError
from dflashops.inventory.load import Inventory
from dflashops.launch.core import launch
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Drafter, EngineName, Method, Playbook
from dflashops.progress import Say, quiet
from dflashops.pydantic_errors import first_error_line

METHODS: tuple[str, ...] = get_args(Method)
ENGINES: tuple[str, ...] = get_args(EngineName)
# k for a speculative method when the playbook runs none (vLLM's n-gram examples use 4)
DEFAULT_K = 4

Launch = Callable[[Playbook], None]
Bench = Callable[[Playbook, str], BenchReport]


class MethodRow(BaseModel):
    """One method's measurement at its concurrency-1 level (else its first level)."""

    model_config = ConfigDict(frozen=True)

    engine: str
    """``name version`` of the engine that served it."""
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
    engine: str | None = None


@dataclass(frozen=True)
class EngineChoice:
    """One ``--engines`` item: ``sglang==0.5.16``; no version: the playbook's own release."""

    name: str
    version: str | None = None

    def __str__(self) -> str:
        return self.name if self.version is None else f"{self.name}=={self.version}"


@dataclass(frozen=True)
class WithoutOwnMethod:
    """An engine that cannot run the playbook's own method (``skipped`` says why): ``book`` is
    the playbook loaded for that engine with speculation off, ``k`` the one n-gram runs with."""

    book: Playbook
    skipped: Skipped
    k: int | None


EngineBook = Playbook | WithoutOwnMethod | Skipped


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
                self._key(row): report.model_dump(mode="json", include={"config", "levels"})
                for row, report in zip(self.rows, self.reports, strict=True)
            },
        }

    def _key(self, row: MethodRow) -> str:
        """The method alone when one engine ran, else ``engine method``."""
        return (
            row.method if len({r.engine for r in self.rows}) < 2 else f"{row.engine} {row.method}"
        )

    def extend(self, other: CompareOutcome) -> None:
        self.rows += other.rows
        self.skipped += other.skipped
        self.reports += other.reports


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


def parse_engines(text: str) -> list[EngineChoice]:
    """``vllm,sglang==0.5.16`` → one choice per engine (a release is pinned exactly)."""
    choices: list[EngineChoice] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, _, version = (x.strip() for x in part.partition("=="))
        if name not in ENGINES:
            raise TuneInputError(
                f"unknown engine {name!r}",
                field="engines",
                hint=f"choose from {', '.join(ENGINES)}",
            )
        if "==" in part and not version:
            raise TuneInputError(
                f"{part!r} pins no release", field="engines", hint="sglang==0.5.16"
            )
        choices.append(EngineChoice(name, version or None))
    if not choices:
        raise TuneInputError(
            "no engines", field="engines", hint=f"choose from {', '.join(ENGINES)}"
        )
    return list(dict.fromkeys(choices))


def parse_engine_k(items: Sequence[str]) -> dict[str, int]:
    """``--k sglang=3`` items → {engine: k} (each engine's tuned k)."""
    chosen: dict[str, int] = {}
    for item in items:
        name, _, raw = item.partition("=")
        if name.strip() not in ENGINES or not raw.strip().isdigit() or int(raw) < 1:
            raise TuneInputError(
                f"--k {item!r} is not ENGINE=K", field="k", hint="e.g. --k vllm=5 --k sglang=3"
            )
        chosen[name.strip()] = int(raw)
    return chosen


def playbook_for_engine(
    path: Path, book: Playbook, choice: EngineChoice, k: int | None = None
) -> EngineBook:
    """The playbook file loaded for ``choice`` (and its k); when the playbook's own method
    cannot run there, the same without speculation (:class:`WithoutOwnMethod`); else why
    nothing can."""
    overrides: list[str] = []
    if choice.name != book.engine.name or choice.version not in (None, book.engine.version):
        if choice.version is None:
            raise TuneInputError(
                f"--engines {choice.name}: the playbook pins {book.engine.name}, so give the "
                f"{choice.name} release to compare",
                field="engines",
                hint=f"--engines {book.engine.name},{choice.name}==X.Y.Z",
            )
        overrides += [f"engine.name={choice.name}", f"engine.version={choice.version}"]
    if k is not None and book.drafter.method != "none":
        overrides.append(f"server.num_speculative_tokens={k}")
    if not overrides:
        return book
    try:
        return load_playbook(path, overrides)
    except PlaybookError as exc:
        refused = Skipped(
            method=book.drafter.method,
            engine=str(choice),
            reason=f"the playbook cannot run on {choice}: {exc.reason}",
        )
    if book.drafter.method == "none":
        return refused
    off = ["drafter.method=none", "drafter.model=null", "server.num_speculative_tokens=null"]
    try:
        plain = load_playbook(path, [*overrides, *off])
    except PlaybookError:
        return refused  # the engine itself cannot run the playbook, whatever the method
    own_k = k if k is not None else book.server.num_speculative_tokens
    return WithoutOwnMethod(book=plain, skipped=refused, k=own_k)


def engine_label(book: Playbook) -> str:
    return f"{book.engine.name} {book.engine.version}"


def playbook_for_method(
    book: Playbook, method: str, own: str | None = None, k: int | None = None
) -> Playbook | Skipped:
    """``book`` changed to run ``method`` (``book`` itself for its own method), or why it
    cannot: none turns speculation off, ngram drops the drafter model and keeps the playbook's k
    (``DEFAULT_K`` when it has none). ``own`` and ``k``: the method and k the playbook file
    runs, when ``book`` is its copy without speculation."""
    if method == book.drafter.method:
        return book
    own = own or book.drafter.method
    if method not in ("none", "ngram"):
        what = "a drafter checkpoint" if method != "mtp" else "a target with MTP layers"
        return Skipped(
            method=method,
            reason=f"needs {what}; the playbook's drafter is {own} (compare it with a playbook "
            f"that runs {method})",
        )
    k = None if method == "none" else k or book.server.num_speculative_tokens or DEFAULT_K
    server = book.server.model_copy(update={"num_speculative_tokens": k})
    try:
        # validated as a whole, as the file is: a method switch must fit the rest of the book
        return Playbook.model_validate(
            {**dict(book), "drafter": Drafter(method=method), "server": server}
        )
    except ValidationError as exc:
        return Skipped(method=method, reason=f"the playbook cannot run it: {first_error_line(exc)}")


def row_from_report(method: str, report: BenchReport, engine: str) -> MethodRow:
    level = report.level(1) or (report.levels[0] if report.levels else None)
    if level is None:
        raise TuneInputError(f"{engine} {method}: the bench measured no level", field="methods")
    return _row(engine, method, report.config.num_speculative_tokens, level)


def _row(engine: str, method: str, k: int | None, level: LevelResult) -> MethodRow:
    positions = level.spec_decode_per_position_acceptance_rates
    return MethodRow(
        engine=engine,
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
    book: Playbook,
    methods: Sequence[str],
    launch: Launch,
    bench: Bench,
    say: Say | None = None,
    *,
    own: str | None = None,
    k: int | None = None,
) -> CompareOutcome:
    """Launch and bench each expressible method in turn (the same bench settings for all)."""
    tell = say or quiet
    engine = engine_label(book)
    outcome = CompareOutcome(rows=[], skipped=[])
    for method in methods:
        at = playbook_for_method(book, method, own, k)
        if isinstance(at, Skipped):
            tell(f"{method}: skipped ({at.reason})")
            outcome.skipped.append(at.model_copy(update={"engine": engine}))
            continue
        tell(f"{method}: launching on {engine}")
        try:
            launch(at)
        except DflashopsError as exc:
            # launch rolled back (the previous server serves): the other cells still run
            tell(f"{method}: skipped (launch failed on {engine})")
            reason = f"launch failed: {exc.one_line()}"
            outcome.skipped.append(Skipped(method=method, engine=engine, reason=reason))
            continue
        tell(f"{method}: benchmarking")
        try:
            report = bench(at, method)
        except WarmupRefused:
            raise  # the request itself is refused: every cell would send it again
        except BenchmarkError as exc:
            # the server died or answered nothing in this cell (BenchInterrupted included: its
            # partial levels are this cell's alone): the cells measured are kept
            tell(f"{method}: skipped (bench failed on {engine})")
            reason = f"bench failed: {exc.one_line()}"
            outcome.skipped.append(Skipped(method=method, engine=engine, reason=reason))
            continue
        outcome.reports.append(report)
        outcome.rows.append(row_from_report(method, report, engine))
    return outcome


def run_engines(
    books: Sequence[EngineBook],
    methods: Sequence[str],
    launch: Launch,
    bench: Bench,
    say: Say | None = None,
) -> CompareOutcome:
    """``run_compare`` per engine's playbook, in order; an engine that cannot run is skipped,
    one that cannot run the playbook's own method runs the rest."""
    tell = say or quiet
    outcome = CompareOutcome(rows=[], skipped=[])
    for book in books:
        if isinstance(book, Skipped):
            tell(f"{book.engine}: skipped ({book.reason})")
            outcome.skipped.append(book)
            continue
        if isinstance(book, WithoutOwnMethod):
            own = book.skipped.method
            if own in methods:
                tell(f"{own}: skipped on {book.skipped.engine} ({book.skipped.reason})")
                outcome.skipped.append(book.skipped)
            rest = [m for m in methods if m != own]
            outcome.extend(run_compare(book.book, rest, launch, bench, tell, own=own, k=book.k))
            continue
        outcome.extend(run_compare(book, methods, launch, bench, tell))
    return outcome


def compare_container(
    inventory: Inventory,
    container: str,
    playbook_path: Path,
    methods: Sequence[str],
    *,
    engines: Sequence[EngineChoice] = (),
    engine_k: dict[str, int] | None = None,
    requests: int | None = None,
    say: Say | None = None,
) -> tuple[CompareOutcome, BenchReport | None]:
    """The real launch and bench; the last bench carries the ``compare`` section."""
    tell = say or quiet
    book = load_playbook(playbook_path)
    # the workload is read once: every engine and method runs the same one
    base = BenchSettings.from_playbook(book, requests=requests)
    chosen = list(engines) or [EngineChoice(book.engine.name)]
    ks = engine_k or {}
    books = [playbook_for_engine(playbook_path, book, c, ks.get(c.name)) for c in chosen]

    def launch_at(at: Playbook) -> None:
        launch(inventory, container, at, progress=tell)

    def bench_at(at: Playbook, method: str) -> BenchReport:
        settings = base.model_copy(update={"label": f"{container} {at.engine.name} {method}"})
        return bench_container(inventory, container, at, settings, progress=tell)

    outcome = run_engines(books, methods, launch_at, bench_at, tell)
    if not outcome.reports:
        return outcome, None
    last = outcome.reports[-1]
    return outcome, last.model_copy(
        update={"compare": outcome.section(), "label": f"{container} compare"}
    )
