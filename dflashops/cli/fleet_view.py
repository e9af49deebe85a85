"""What a command over many containers shows while it works (``status``, ``provision``,
``destroy``), on stderr, always in inventory order:

- on a terminal, one live line per container (rich's live display, as every command's progress:
  :func:`dflashops.cli.progress.live_progress`): its current step, then its result, under a
  line that counts those finished;
- anywhere else (a pipe, a file, a CI log), one line per finished container, each written once
  that container and every one before it have finished, so the lines read in inventory order
  whatever order the work ends in; a run with nothing to write for ``HEARTBEAT_S`` says which
  container it waits for and what that one does.

The container's work reports through :class:`dflashops.proxmox.fleet.Tell`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import click

from dflashops.cli.progress import HEARTBEAT_S, Heartbeat, live_progress, progress_console

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from dflashops.proxmox.fleet import Tell

# inventory.models.MAX_PARALLEL, spelled here so a command's --help imports no pydantic
# (tests/unit/test_fleet_view.py holds them equal)
MAX_PARALLEL = 64

parallel_option = click.option(
    "--parallel",
    type=click.IntRange(1, MAX_PARALLEL),
    default=None,
    metavar="N",
    help="Containers worked on at once. [default: the inventory's parallel, 8 unless set]",
)


@contextmanager
def fleet_lines(description: str, names: Sequence[str], *, enabled: bool = True) -> Iterator[Tell]:
    """Yield the :class:`Tell` of a command's containers ``names`` (see the module)."""
    from dflashops.proxmox.fleet import QUIET  # deferred: start-up time (--help)

    if not enabled or not names:
        yield QUIET
        return
    console = progress_console()
    if console.is_interactive:
        with live_progress(console) as progress:
            yield LiveFleet(progress, description, names)
        return
    with finished_lines(description, names, console) as lines:
        yield lines


class LaterTell:
    """A :class:`Tell` whose display starts later (``destroy`` shows it once the answer to its
    question is in); until :meth:`start` it says nothing."""

    def __init__(self) -> None:
        self._target: Tell | None = None

    def start(self, target: Tell) -> None:
        self._target = target

    def __call__(self, name: str, message: str) -> None:
        if self._target is not None:
            self._target(name, message)

    def done(self, name: str, line: str) -> None:
        if self._target is not None:
            self._target.done(name, line)


class LiveFleet:
    """One live line per container, in inventory order, under a count of those finished."""

    def __init__(self, progress: Progress, description: str, names: Sequence[str]) -> None:
        self._progress, self._description = progress, description
        self._lock = threading.Lock()  # containers tell from their own threads
        self._total, self._finished = len(names), 0
        self._head = progress.add_task(self._count())
        self._tasks: dict[str, TaskID] = {
            name: progress.add_task(f"{name}: waiting", total=1) for name in names
        }

    def _count(self) -> str:
        return f"{self._description}: {self._finished} of {self._total} finished"

    def __call__(self, name: str, message: str) -> None:
        with self._lock:
            task = self._tasks.get(name)
            if task is None:
                self._tasks[name] = self._progress.add_task(f"{name}: {message}", total=1)
            else:
                self._progress.update(task, description=f"{name}: {message}")

    def done(self, name: str, line: str) -> None:
        """The container's result stays on its line; its spinner and clock stop."""
        with self._lock:
            task = self._tasks.get(name)
            if task is None:
                task = self._tasks[name] = self._progress.add_task(line, total=1)
            self._progress.update(task, description=line, completed=1)
            self._finished += 1
            self._progress.update(self._head, description=self._count())


@contextmanager
def finished_lines(
    description: str, names: Sequence[str], console: Console
) -> Iterator[FinishedLines]:
    """:class:`FinishedLines` on ``console``, with its heartbeat."""

    def write(line: str) -> None:
        # soft_wrap: a progress line is never folded, whatever the width
        console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)

    lines = FinishedLines(description, names, write)
    heartbeat = Heartbeat(lines.beat)
    try:
        yield lines
    finally:
        heartbeat.stop()
        lines.close()


class FinishedLines:
    """One line per finished container, released in inventory order (see the module);
    thread-safe."""

    def __init__(
        self,
        description: str,
        names: Sequence[str],
        write: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self._prefix = f"{description}: " if description else ""
        self._order = list(names)
        self._write, self._clock, self._heartbeat_s = write, clock, heartbeat_s
        self._lock = threading.Lock()
        self._next = 0  # the first container whose line is not written yet
        self._finished: dict[str, str] = {}
        self._doing: dict[str, str] = {}  # each container's current step, for the heartbeat
        self._started = self._last = clock()

    def __call__(self, name: str, message: str) -> None:
        with self._lock:
            self._doing[name] = message

    def done(self, name: str, line: str) -> None:
        with self._lock:
            if name not in self._order[self._next :]:  # not one of ours, or said twice
                self._emit(line)
                return
            self._finished[name] = line
            while self._next < len(self._order) and self._order[self._next] in self._finished:
                self._emit(self._finished.pop(self._order[self._next]))
                self._next += 1

    def beat(self) -> None:
        """A line when nothing was written for ``heartbeat_s``: who is waited for, doing what."""
        with self._lock:
            now = self._clock()
            if self._next >= len(self._order) or now - self._last < self._heartbeat_s:
                return
            waiting = self._order[self._next]
            finished = self._next + len(self._finished)
            doing = self._doing.get(waiting, "not started")
            self._emit(
                f"{finished} of {len(self._order)} finished after {now - self._started:.0f}s; "
                f"next in order: {waiting}: {doing}"
            )

    def close(self) -> None:
        """Write what finished but waited for one before it that never finished (the command
        stopped early: Ctrl-C, or an error of its own)."""
        with self._lock:
            for name in self._order[self._next :]:
                if name in self._finished:
                    self._emit(self._finished.pop(name))
            self._next = len(self._order)

    def _emit(self, line: str) -> None:
        self._write(self._prefix + line)
        self._last = self._clock()
