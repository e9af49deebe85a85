"""Live tuning: launch at the k the plan asks for, bench, learn, repeat; then verify k*.

The loop is pure over two injected steps, so it is tested without a server:

    launch(k)  -> deploy the playbook with ``num_speculative_tokens = k`` and wait until ready
    measure(k) -> bench the running server (concurrency 1) and return one ``TuneRun``

``run_live_tune`` spends at most ``plan.budget`` launches on probes, plus one more to return to k*
when k* was not the last k launched, and always benches k* once more to check the prediction.
``set_num_speculative_tokens`` writes k* into a playbook file with a one-line text edit, so the
file's comments and layout survive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflashops.errors import TuneInputError
from dflashops.tune.model import TuneResult
from dflashops.tune.plan import Probe, TunePlan
from dflashops.tune.runs import TuneRun, measured_throughput

if TYPE_CHECKING:
    from dflashops.bench.models import BenchReport
    from dflashops.inventory.load import Inventory
    from dflashops.playbook.models import Playbook

Launch = Callable[[int], None]
Measure = Callable[[int], TuneRun]
Say = Callable[[str], None]

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


def run_live_tune(
    plan: TunePlan, launch: Launch, measure: Measure, say: Say | None = None
) -> LiveTuneOutcome:
    """Probe as the plan asks, recommend, then launch (if needed) and bench k* once more."""
    tell = say or (lambda _message: None)
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
class LiveTuneJob:
    """``tune NAME``: the container, its playbook file and how to search and measure."""

    container: str
    playbook_path: Path
    overrides: tuple[str, ...] = ()
    k_min: int | None = None
    k_max: int | None = None
    budget: int | None = None
    requests: int | None = None
    workdir: Path = Path()


@dataclass
class LiveTuneReport:
    """The outcome, the verify bench carrying a ``tune`` section, and the playbook change."""

    outcome: LiveTuneOutcome
    report: BenchReport
    k_change: tuple[str, str] | None
    bench_files: list[Path]


def live_tune(
    inventory: Inventory, job: LiveTuneJob, *, say: Say | None = None, write: bool = True
) -> LiveTuneReport:
    """Run the loop against the container's real server, then write k* into the playbook
    (``write=False``: only report the change)."""
    from dflashops.bench.container import bench_container
    from dflashops.bench.runner import BenchSettings
    from dflashops.launch.core import launch
    from dflashops.playbook.load import load_playbook
    from dflashops.roofline.request import RooflineRequest
    from dflashops.tune.model import TuneSettings
    from dflashops.tune.source import load_runs

    tell = say or (lambda _message: None)
    book = load_playbook(job.playbook_path, job.overrides)
    if book.drafter.method == "none" or not book.server.num_speculative_tokens:
        raise TuneInputError(
            f"{job.playbook_path}: the playbook runs without speculative decoding (no k to tune)",
            field="playbook",
        )
    plan = TunePlan(
        settings=TuneSettings(
            k_min=job.k_min if job.k_min is not None else book.tune.k_min,
            k_max=job.k_max if job.k_max is not None else book.tune.k_max,
        ),
        budget=job.budget if job.budget is not None else book.tune.budget,
        current_k=book.server.num_speculative_tokens,
    )
    reports: list[BenchReport] = []
    files: list[Path] = []

    def book_at(k: int) -> Playbook:
        return load_playbook(
            job.playbook_path, [*job.overrides, f"server.num_speculative_tokens={k}"]
        )

    def launch_at(k: int) -> None:
        launch(inventory, job.container, book_at(k), progress=tell)

    def measure(k: int) -> TuneRun:
        at_k = book_at(k)
        settings = BenchSettings.from_playbook(
            at_k, concurrency=(1,), requests=job.requests, label=f"{job.container} k={k}"
        )
        # every bench carries the bandwidth roofline on a GPU server (a note on a CPU one)
        report = bench_container(
            inventory, job.container, at_k, settings, progress=tell, roofline=RooflineRequest()
        )
        path = report.save(job.workdir / f"tune-{job.container}-{len(reports) + 1}-k{k}.json")
        reports.append(report)
        files.append(path)
        return load_runs(path)[0]

    outcome = run_live_tune(plan, launch_at, measure, tell)
    text = job.playbook_path.read_text(encoding="utf-8")
    change = k_line_change(text, outcome.best_k)
    if write and change is not None:
        job.playbook_path.write_text(
            set_num_speculative_tokens(text, outcome.best_k), encoding="utf-8"
        )
    final = reports[-1].model_copy(
        update={"tune": outcome.section(), "label": f"{job.container} tuned k={outcome.best_k}"}
    )
    return LiveTuneReport(outcome=outcome, report=final, k_change=change, bench_files=files)
