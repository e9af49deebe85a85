"""The real launch and bench behind both live tuners (``tune NAME`` and ``tune NAME --load``):
one container's playbook served in a variation, benched, each bench kept in memory and saved to
the request's ``probe_dir`` when it names one."""

from __future__ import annotations

from pathlib import Path

from dflashops.bench.container import bench_container
from dflashops.bench.models import BenchReport
from dflashops.bench.settings import BenchSettings
from dflashops.deployment.access import ContainerAccess
from dflashops.inventory.load import Inventory
from dflashops.launch.core import launch
from dflashops.playbook.models import Playbook
from dflashops.progress import Say
from dflashops.roofline.request import RooflineRequest
from dflashops.tune.request import LiveTuneRequest


class ProbeBench:
    """Launch a variation of the playbook on the request's container, bench it with
    ``settings``; ``reports`` and ``files`` keep every bench in order."""

    def __init__(
        self,
        inventory: Inventory,
        request: LiveTuneRequest,
        *,
        settings: BenchSettings,
        say: Say,
        access: ContainerAccess,
    ) -> None:
        self.inventory, self.request, self.settings = inventory, request, settings
        self.say, self.access = say, access
        self.reports: list[BenchReport] = []
        self.files: list[Path] = []

    def launch(self, book: Playbook) -> None:
        launch(self.inventory, self.request.container, book, progress=self.say, access=self.access)

    def bench(self, book: Playbook, label: str, file_stem: str) -> tuple[BenchReport, str]:
        """Bench what runs (``book`` says what that is); the report and where it came from:
        the saved file's name, else ``probe N``. Every bench carries the bandwidth roofline on
        a GPU server (a note on a CPU one)."""
        report = bench_container(
            self.inventory,
            self.request.container,
            book,
            self.settings.model_copy(update={"label": label}),
            progress=self.say,
            roofline=RooflineRequest(),
            connection=self.access.conn,
        )
        self.reports.append(report)
        if self.request.probe_dir is None:
            return report, f"probe {len(self.reports)}"
        name = f"{file_stem}.json"
        self.files.append(report.save(self.request.probe_dir / name))
        return report, name
