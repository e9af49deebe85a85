"""``--evaluate``: the trained drafter benched next to the one it replaces, on the same server.

1. the drafter it replaces: its bench from an earlier evaluation in the local folder when that is
   recent (a day) and of the same drafter and k; otherwise the given playbook is launched and
   benched now;
2. the new drafter: the playbook pointed at the export is launched and benched;
3. restore: the given playbook is launched again (``--promote`` launches the promoted one
   instead, which serves the new drafter).

Both benches use the playbook's ``bench`` workload at concurrency 1 (acceptance per position
does not depend on load; tok/s is single-stream decode), and are saved next to the provenance.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dflashops.bench.container import bench_container
from dflashops.bench.models import BenchReport
from dflashops.bench.settings import BenchSettings
from dflashops.deployment.access import ContainerAccess
from dflashops.errors import BenchmarkError, DflashopsError
from dflashops.inventory.load import Inventory
from dflashops.launch.core import launch
from dflashops.playbook.models import Playbook
from dflashops.progress import Say

RECENT = timedelta(days=1)
BEFORE_FILE = "bench-before.json"
AFTER_FILE = "bench-after.json"


@dataclass(frozen=True)
class DrafterScore:
    label: str
    drafter: str | None
    k: int | None
    tok_s: float
    acceptance_length: float | None
    per_position: tuple[float, ...]
    bench_file: str
    reused: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "drafter": self.drafter,
            "k": self.k,
            "tok_s": self.tok_s,
            "acceptance_length": self.acceptance_length,
            "per_position": list(self.per_position),
            "bench_file": self.bench_file,
            "reused": self.reused,
        }


@dataclass(frozen=True)
class Evaluation:
    before: DrafterScore | None  # None: nothing served a drafter before
    after: DrafterScore

    @property
    def gain(self) -> float | None:
        if self.before is None or self.before.tok_s <= 0:
            return None
        return self.after.tok_s / self.before.tok_s - 1.0

    def to_json(self) -> dict[str, Any]:
        return {
            "before": self.before.to_json() if self.before else None,
            "after": self.after.to_json(),
            "gain": self.gain,
        }


def drafter_of(book: Playbook) -> str | None:
    return str(book.drafter.model.path) if book.drafter.model else None


def recent_bench(path: Path, book: Playbook, now: datetime | None = None) -> BenchReport | None:
    """The saved bench at ``path`` when it measured this drafter at this k within a day."""
    if not path.is_file():
        return None
    try:
        report = BenchReport.load(path)
    except BenchmarkError:
        return None
    config = report.config
    fresh = (now or datetime.now(UTC)) - report.created_at < RECENT
    same = config.drafter == drafter_of(book) and (
        config.num_speculative_tokens == book.server.num_speculative_tokens
    )
    return report if fresh and same else None


def score(
    report: BenchReport, label: str, book: Playbook, file: Path, *, reused: bool
) -> DrafterScore:
    level = report.level(1) or (report.levels[0] if report.levels else None)
    if level is None:
        raise BenchmarkError(f"{file}: the bench has no level to compare")
    return DrafterScore(
        label=label,
        drafter=drafter_of(book),
        k=book.server.num_speculative_tokens,
        tok_s=level.output_throughput,
        acceptance_length=level.spec_decode_acceptance_length,
        per_position=tuple(level.spec_decode_per_position_acceptance_rates or ()),
        bench_file=str(file),
        reused=reused,
    )


class Evaluator:
    """The launches and benches of one evaluation on one container."""

    def __init__(
        self, inventory: Inventory, access: ContainerAccess, out_dir: Path, say: Say
    ) -> None:
        self.inventory = inventory
        self.access = access
        self.container = access.name
        self.out_dir = out_dir
        self.say = say

    def bench(self, book: Playbook, label: str) -> BenchReport:
        settings = BenchSettings.from_playbook(
            book, concurrency=(1,), label=f"{self.container} {label}"
        )
        report = bench_container(
            self.inventory,
            self.container,
            book,
            settings,
            progress=self.say,
            connection=self.access.conn,
        )
        if not report.levels or report.levels[0].completed == 0:
            raise BenchmarkError(f"every bench request to {label} failed")
        return report

    def launch(self, book: Playbook, why: str) -> None:
        self.say(f"evaluate: launching {why}")
        launch(self.inventory, self.container, book, progress=self.say, access=self.access)

    def run(
        self,
        current: Playbook | None,
        trained: Playbook,
        *,
        restore: Callable[[], None],
    ) -> Evaluation:
        """Bench ``current`` (the drafter it replaces, when one is served) and ``trained``;
        ``restore`` runs last, also when a bench fails."""
        try:
            before = self._before(current) if current is not None else None
            self.launch(trained, "the trained drafter")
            self.say("evaluate: benching the trained drafter")
            file = self.out_dir / AFTER_FILE
            report = self.bench(trained, "trained drafter")
            report.save(file)
            after = score(report, "trained", trained, file, reused=False)
        except DflashopsError:
            restore()
            raise
        restore()
        return Evaluation(before, after)

    def _before(self, current: Playbook) -> DrafterScore:
        file = self.out_dir / BEFORE_FILE
        saved = recent_bench(file, current)
        if saved is not None:
            self.say(f"evaluate: reusing the bench of the current drafter from {file}")
            return score(saved, "current", current, file, reused=True)
        self.launch(current, "the current drafter")
        self.say("evaluate: benching the current drafter")
        report = self.bench(current, "current drafter")
        report.save(file)
        return score(report, "current", current, file, reused=False)
