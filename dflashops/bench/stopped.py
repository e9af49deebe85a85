"""When the server stops answering during a benchmark (killed, crashed, its link cut).

``ServerStopped`` is what a call to the server raises once a connection was refused, reset or
cut; ``LevelStopped`` is the same inside a level, carrying whatever that level measured.
``BenchInterrupted`` is what ``run_benchmark`` raises then: it carries the partial report (the
finished levels, the incomplete one, ``stopped``), so that every caller fails by default (tune,
up, compare, a drafter's evaluation never take a partial report for a measurement) while
``bench`` saves and shows it before it exits 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from dflashops.bench.models import BenchReport, LevelResult, RunStopped
from dflashops.errors import BenchmarkError

Phase = Literal["before", "during", "after"]


class ServerStopped(BenchmarkError):
    """The server stopped answering: ``error`` says what failed, e.g. ``connection refused at
    http://10.0.0.5:8000/metrics``."""

    def __init__(self, error: str) -> None:
        super().__init__(f"the server stopped answering: {error}")
        self.error = error


class WarmupRefused(BenchmarkError):
    """The server answered the warm-up request with a client error (HTTP 4xx other than 408 and
    429): the request itself is wrong for this server (no chat template, an unknown model name,
    too many tokens), so every level, and every cell of a ``compare``, would fail the same way."""


class LevelStopped(ServerStopped):
    """The server stopped answering ``phase`` level ``concurrency``; ``level`` is what that level
    measured (None before its measured requests began)."""

    def __init__(
        self, error: str, *, concurrency: int, phase: Phase, level: LevelResult | None
    ) -> None:
        super().__init__(error)
        self.concurrency = concurrency
        self.phase: Phase = phase
        self.level = level

    def record(self, later: Sequence[int]) -> RunStopped:
        """The report's ``stopped``: this stop, and the levels it left unrun (this one, when
        nothing of it was measured, and the ``later`` ones)."""
        not_run = [*([] if self.level is not None else [self.concurrency]), *later]
        text = f"the server stopped answering {self.phase} level c={self.concurrency}: {self.error}"
        if self.level is not None:
            text += f" ({_counts(self.level)})"
        if not_run:
            text += f"; not run: {', '.join(f'c={c}' for c in not_run)}"
        return RunStopped(
            message=text,
            error=self.error,
            concurrency=self.concurrency,
            phase=self.phase,
            levels_not_run=not_run,
        )


class BenchInterrupted(BenchmarkError):
    """The server stopped answering; ``report`` holds what was measured (not saved)."""

    def __init__(self, report: BenchReport) -> None:
        if report.stopped is None:
            raise ValueError("BenchInterrupted needs a report that says where it stopped")
        super().__init__(report.stopped.message, hint=_rerun(report.config.container))
        self.report = report

    def saved(self, path: Path) -> BenchmarkError:
        """The error ``bench`` ends with once it saved the partial report at ``path``."""
        return BenchmarkError(
            self.message,
            hint=f"what was measured is in {path}; {_rerun(self.report.config.container)}",
        )


def _rerun(container: str | None) -> str:
    logs = f"`dflashops logs {container}` says why it stopped; " if container else ""
    return f"{logs}rerun once the server answers again"


def _counts(level: LevelResult) -> str:
    total = level.completed + level.failed + level.not_sent
    text = f"{level.completed} of {total} requests completed, {level.failed} failed"
    return text + (f", {level.not_sent} not sent" if level.not_sent else "")
