"""Live tuning: launch at the k the plan asks for, bench, learn, repeat; then verify k*.

The loop is pure over two injected steps, so it is tested without a server:

    launch(k)  -> deploy the playbook with ``num_speculative_tokens = k`` and wait until ready
    measure(k) -> bench the running server (concurrency 1) and return one ``TuneRun``

``run_live_tune`` spends at most ``plan.budget`` launches on probes, plus one more to return to k*
when k* was not the last k launched, and always benches k* once more to check the prediction.
``set_num_speculative_tokens`` writes k* into a playbook file with a one-line text edit, so the
file's comments and layout survive.

``live_tune`` is the one core call of ``tune NAME``: it reads the playbook once, wires the real
steps (``launch`` of the playbook at k, ``bench_container`` at concurrency 1, each report turned
into a ``TuneRun`` in memory) and writes k* back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dflashops.bench.models import BenchReport
from dflashops.bench.settings import BenchSettings
from dflashops.deployment.access import ContainerAccess, connect
from dflashops.deployment.playbooks import playbook_for_container
from dflashops.errors import TuneInputError
from dflashops.inventory.load import Inventory
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from dflashops.progress import Say, quiet
from dflashops.pydantic_errors import first_error_line
from dflashops.remote import SshConnection
from dflashops.tune.k_ceiling import dflash_k_ceiling
from dflashops.tune.model import TuneResult, TuneSettings
from dflashops.tune.plan import Probe, TunePlan
from dflashops.tune.probes import ProbeBench
from dflashops.tune.request import LiveTuneRequest
from dflashops.tune.runs import TuneRun, measured_throughput
from dflashops.tune.source import run_from_report

Launch = Callable[[int], None]
Measure = Callable[[int], TuneRun]

_K_LINE = re.compile(r"^(?P<lead>\s*num_speculative_tokens:\s*)(?P<k>\d+)(?P<tail>[^\n]*)$", re.M)


@dataclass
class LiveTuneOutcome:
    """Everything the loop did and learned."""

    start_k: int
    runs: list[TuneRun]
    probes: list[Probe]
    launches: list[int]
    result: TuneResult
    verify: TuneRun
    notes: list[str] = field(default_factory=list)

    @property
    def best_k(self) -> int:
        return self.result.best_k

    @property
    def predicted_tok_s(self) -> float:
        return self.result.best_throughput_tok_s

    @property
    def measured_tok_s(self) -> float | None:
        return measured_throughput(self.verify)

    @property
    def start_tok_s(self) -> float | None:
        """Measured at the starting k (the first probe)."""
        first = next((run for run in self.runs if run.k == self.start_k), None)
        return None if first is None else measured_throughput(first)

    @property
    def gain(self) -> float | None:
        """Measured throughput at k* relative to the starting k (0.10 = 10 % faster)."""
        start, now = self.start_tok_s, self.measured_tok_s
        if start is None or now is None or start <= 0:
            return None
        return now / start - 1.0

    def section(self) -> dict[str, Any]:
        """The ``tune`` section of a BenchReport."""
        return {
            "mode": "live",
            "start_k": self.start_k,
            "best_k": self.best_k,
            "predicted_tok_s": self.predicted_tok_s,
            "measured_tok_s": self.measured_tok_s,
            "start_tok_s": self.start_tok_s,
            "gain": self.gain,
            "launches": self.launches,
            "probes": [probe.model_dump(mode="json") for probe in self.probes],
            "runs": [run.model_dump(mode="json") for run in self.runs],
            "verify": self.verify.model_dump(mode="json"),
            "notes": self.notes,
            "result": self.result.model_dump(mode="json"),
        }


def playbook_to_tune(request: LiveTuneRequest) -> tuple[Path, Playbook, int]:
    """The container's playbook, loaded, and its k: both live tuners start here. A playbook
    without speculative decoding, or without exactly one k line to edit (k* is written by a
    one-line edit), fails now, before the first launch."""
    path = playbook_for_container(request.container, request.playbook)
    book = load_playbook(path)
    current_k = book.server.num_speculative_tokens
    if book.drafter.method == "none" or not current_k:
        raise TuneInputError(
            f"{path}: the playbook runs without speculative decoding (no k to tune)",
            field="playbook",
        )
    k_line_change(path.read_text(encoding="utf-8"), current_k)
    return path, book, current_k


def run_live_tune(
    plan: TunePlan, launch: Launch, measure: Measure, say: Say | None = None
) -> LiveTuneOutcome:
    """Probe as the plan asks, recommend, then launch (if needed) and bench k* once more."""
    tell = say or quiet
    runs: list[TuneRun] = []
    probes: list[Probe] = []
    launches: list[int] = []
    while (probe := plan.next_probe(runs)) is not None:
        tell(f"probe k={probe.k}: {probe.reason}")
        probes.append(probe)
        launch(probe.k)
        launches.append(probe.k)
        runs.append(measure(probe.k))
    result = plan.recommend(runs)
    notes: list[str] = []
    best = result.best_k
    if launches[-1] != best:
        tell(f"k*={best}: relaunching to verify")
        launch(best)
        launches.append(best)
    else:
        notes.append(f"k*={best} was the last k launched: verified without a relaunch")
    tell(f"k*={best}: verifying")
    verify = measure(best)
    return LiveTuneOutcome(
        start_k=plan.start_k(),
        runs=runs,
        probes=probes,
        launches=launches,
        result=result,
        verify=verify,
        notes=notes,
    )


def set_num_speculative_tokens(text: str, k: int) -> str:
    """``text`` with its one ``num_speculative_tokens:`` line set to ``k`` (comments kept)."""
    matches = list(_K_LINE.finditer(text))
    if len(matches) != 1:
        raise TuneInputError(
            f"expected one `num_speculative_tokens: N` line in the playbook, found {len(matches)}",
            field="playbook",
            hint="set server.num_speculative_tokens by hand",
        )
    match = matches[0]
    return f"{text[: match.start()]}{match['lead']}{k}{match['tail']}{text[match.end() :]}"


def k_line_change(text: str, k: int) -> tuple[str, str] | None:
    """The (old, new) ``num_speculative_tokens`` line, or None when it already says ``k``."""
    updated = set_num_speculative_tokens(text, k)
    if updated == text:
        return None
    old = next(m.group(0) for m in _K_LINE.finditer(text))
    new = next(m.group(0) for m in _K_LINE.finditer(updated))
    return old.strip(), new.strip()


@dataclass
class LiveTuneReport:
    """The outcome, the verify bench carrying a ``tune`` section, the playbook file and the
    change to its k line (None: it already says k*), and each probe's saved bench."""

    outcome: LiveTuneOutcome
    report: BenchReport
    playbook_path: Path
    k_change: tuple[str, str] | None
    bench_files: list[Path]


def live_tune(
    inventory: Inventory,
    request: LiveTuneRequest,
    *,
    say: Say | None = None,
    access: ContainerAccess | None = None,
) -> LiveTuneReport:
    """Run the loop against the container's real server, then write k* into the playbook file
    (``request.write_playbook=False``: only report the change).

    The playbook is read once; each probe launches a copy of it at its k. A playbook whose k
    line cannot be edited fails here, before the first launch. Every launch and bench goes over
    one connection: ``access`` (the caller's, left open) or one opened here."""
    tell = say or quiet
    path, book, current_k = playbook_to_tune(request)
    settings = _settings(request, book, path)
    with ExitStack() as stack:
        if access is None:
            access = connect(inventory, request.container)
            stack.enter_context(access)
        plan = TunePlan(
            settings=_within_drafter(access.conn, book, settings, tell),
            budget=request.budget if request.budget is not None else book.tune.budget,
            current_k=current_k,
        )
        steps = _ContainerSteps(inventory, request, book, tell, access)
        outcome = run_live_tune(plan, steps.launch_k, steps.measure, tell)
    text = path.read_text(encoding="utf-8")
    change = k_line_change(text, outcome.best_k)
    if request.write_playbook and change is not None:
        path.write_text(set_num_speculative_tokens(text, outcome.best_k), encoding="utf-8")
    final = steps.reports[-1].model_copy(
        update={
            "tune": outcome.section(),
            "label": f"{request.container} tuned k={outcome.best_k}",
        }
    )
    return LiveTuneReport(
        outcome=outcome,
        report=final,
        playbook_path=path,
        k_change=change,
        bench_files=steps.files,
    )


def playbook_at_k(book: Playbook, k: int) -> Playbook:
    """``book`` running ``num_speculative_tokens = k`` (k within the plan's checked range)."""
    server = book.server.model_copy(update={"num_speculative_tokens": k})
    return book.model_copy(update={"server": server})


def _settings(request: LiveTuneRequest, book: Playbook, path: Path) -> TuneSettings:
    """The request's range over the playbook's ``tune`` section; a mix of the two may not fit."""
    try:
        return TuneSettings(
            k_min=request.k_min if request.k_min is not None else book.tune.k_min,
            k_max=request.k_max if request.k_max is not None else book.tune.k_max,
        )
    except ValidationError as exc:
        raise TuneInputError(
            f"{path}: tune range: {first_error_line(exc)}",
            field="k-min",
            hint="give both --k-min and --k-max",
        ) from exc


def _within_drafter(
    conn: SshConnection, book: Playbook, settings: TuneSettings, say: Say
) -> TuneSettings:
    """``settings`` with ``k_max`` at most what the container's DFlash drafter can serve."""
    ceiling = dflash_k_ceiling(conn, book)
    if ceiling is None or settings.k_max <= ceiling:
        return settings
    if settings.k_min > ceiling:
        raise TuneInputError(
            f"k_min {settings.k_min} is above {ceiling}, the most this drafter serves "
            f"(block_size {ceiling + 1})",
            field="k-min",
        )
    say(f"k_max {settings.k_max} lowered to {ceiling}: the drafter's block_size is {ceiling + 1}")
    return settings.model_copy(update={"k_max": ceiling})


class _ContainerSteps(ProbeBench):
    """The loop's real ``launch(k)`` and ``measure(k)`` on one container, at concurrency 1."""

    def __init__(
        self,
        inventory: Inventory,
        request: LiveTuneRequest,
        book: Playbook,
        say: Say,
        access: ContainerAccess,
    ) -> None:
        # the workload is read once: the bench section does not change with k
        settings = BenchSettings.from_playbook(book, concurrency=(1,), requests=request.requests)
        super().__init__(inventory, request, settings=settings, say=say, access=access)
        self.book = book

    def launch_k(self, k: int) -> None:
        self.launch(playbook_at_k(self.book, k))

    def measure(self, k: int) -> TuneRun:
        container = self.request.container
        report, origin = self.bench(
            playbook_at_k(self.book, k),
            f"{container} k={k}",
            f"tune-{container}-{len(self.reports) + 1}-k{k}",
        )
        return run_from_report(report, origin)
