"""Progress of long waits: the one place every command shows it, on stderr.

On a terminal: rich's live display, as always (a transient spinner with the current step, one
line per lane; ``bench`` keeps its bars per level). Anywhere else (a pipe, a file, a CI log) a
live display shows nothing until it ends, so each step becomes plain lines, written and
flushed as they happen:

    launch lab-dflash on lab-ct1: pushing 4 files
    launch lab-dflash on lab-ct1: pushing 4 files: done in 12.3s
    launch lab-dflash on lab-ct1: waiting for readiness
    launch lab-dflash on lab-ct1: waiting for readiness: still running after 30s
    launch lab-dflash on lab-ct1: waiting for readiness: done in 41.0s

A step is one ``say(message)`` (the core's :data:`dflashops.progress.Say`): it ends when the
next one on its lane begins, the last when the display closes ("failed after" when the block
raised). A step without news for ``HEARTBEAT_S`` says it still runs, so a pipe is never silent
for minutes whatever the core reports. Lanes are parallel work (``up``'s pairs) within the
command's current step: a new step of the command's own (lane ``MAIN``) ends them all.

Only the standard library at import time: ``dflashops --help`` loads this module.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from dflashops.progress import Say

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

HEARTBEAT_S = 30.0
MAIN = ""  # the lane of the command's own steps


class Lanes(Protocol):
    """``tell(lane, message)``: the next step on that lane; ``tell.done(lane, message)``: the
    lane's last word (an outcome, said once: no step runs on after it)."""

    def __call__(self, lane: str, message: str) -> None: ...

    def done(self, lane: str, message: str) -> None: ...


@dataclass(frozen=True)
class _Tell:
    step: Callable[[str, str], None]
    end: Callable[[str, str], None]

    def __call__(self, lane: str, message: str) -> None:
        self.step(lane, message)

    def done(self, lane: str, message: str) -> None:
        self.end(lane, message)


@contextmanager
def spinner(description: str, *, enabled: bool = True) -> Iterator[Say]:
    """Yield ``say(message)``: each call is the next step of ``description`` (see the module);
    nothing is shown when not ``enabled``."""
    with lanes(description, enabled=enabled) as tell:

        def say(message: str) -> None:
            tell(MAIN, message)

        yield say


@contextmanager
def lanes(description: str = "", *, enabled: bool = True) -> Iterator[Lanes]:
    """Yield ``tell(lane, message)``: ``MAIN`` for the command's own steps, any other lane for
    parallel work (its own line on a terminal). ``description`` names the command: the first
    spinner text on a terminal, each line's prefix elsewhere."""
    if not enabled:
        yield _Tell(_nobody, _nobody)
        return
    console = progress_console()
    if console.is_interactive:
        with live_progress(console) as progress:
            live = LiveLanes(progress, description)
            yield _Tell(live.tell, live.done)
        return
    with step_lines(description, console) as lines:
        yield _Tell(lines.step, lines.done)


def _nobody(_lane: str, _message: str) -> None:
    """The ``tell`` of a display that is off (``--json``)."""


def progress_console() -> Console:
    from dflashops.cli.console import make_console

    return make_console(stderr=True)


def live_progress(console: Console, *, bars: bool = False) -> Progress:
    """The live display on a terminal: spinner, text, elapsed time, transient; ``bars`` adds a
    bar, a count and a rate per task and keeps them on screen (``bench``'s levels)."""
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    # rich's default spinner is braille; "line" spins with ASCII characters
    frames = "line" if console.options.ascii_only else "dots"
    # a step's text is the core's plain words: "pair [launch] ..." is no markup tag
    text = TextColumn("{task.description}", markup=False)
    columns: list[ProgressColumn] = [SpinnerColumn(frames), text]
    if bars:
        columns += [
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TextColumn("{task.fields[rate]}"),
        ]
    columns.append(TimeElapsedColumn())
    return Progress(*columns, console=console, transient=not bars)


class LiveLanes:
    """Lanes on a live display: one task (a spinner line) per lane."""

    def __init__(self, progress: Progress, description: str) -> None:
        self._progress = progress
        self._tasks: dict[str, TaskID] = {}
        self._lock = threading.Lock()  # up's pairs tell from their own threads
        if description:
            self._tasks[MAIN] = progress.add_task(description)

    def tell(self, lane: str, message: str) -> None:
        with self._lock:
            if lane == MAIN:  # the command moved on: the parallel work it held is over
                for other in [name for name in self._tasks if name != MAIN]:
                    self._progress.remove_task(self._tasks.pop(other))
            task = self._tasks.get(lane)
            if task is None:
                self._tasks[lane] = self._progress.add_task(message)
            else:
                self._progress.update(task, description=message)

    def done(self, lane: str, message: str) -> None:
        """The lane ends: its line goes (the command prints its outcomes after the display)."""
        with self._lock:
            task = self._tasks.pop(lane, None)
            if task is not None:
                self._progress.remove_task(task)


@contextmanager
def step_lines(description: str, console: Console) -> Iterator[StepLines]:
    """Plain step lines on ``console`` (see the module), with their heartbeat."""

    def write(line: str) -> None:
        # soft_wrap: a progress line is never folded, whatever the width
        console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)

    lines = StepLines(description, write)
    heartbeat = Heartbeat(lines.beat)
    try:
        yield lines
    except BaseException as exc:
        lines.close(exc)
        raise
    else:
        lines.close()
    finally:
        heartbeat.stop()


@dataclass
class _Step:
    message: str
    started: float
    last_line: float  # when a line last said it


class StepLines:
    """Steps as plain lines: one as a step starts, one as it ends with its duration, one per
    ``heartbeat_s`` while it runs without news. Thread-safe: lanes tell from their threads."""

    def __init__(
        self,
        description: str,
        write: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self._prefix = f"{description}: " if description else ""
        self._write, self._clock, self._heartbeat_s = write, clock, heartbeat_s
        self._open: dict[str, _Step] = {}
        self._lock = threading.Lock()

    def step(self, lane: str, message: str) -> None:
        """End ``lane``'s step (``MAIN``: every lane's) and start ``message``; the same step
        said again with new numbers (readiness polls once a second: "loading the model (12s)
        | <its last log line>") is news of the running step, not a new one."""
        with self._lock:
            current = self._open.get(lane)
            if current is not None and step_key(current.message) == step_key(message):
                current.message = message
                return
            now = self._clock()
            for ended in list(self._open) if lane == MAIN else [lane]:
                self._end(ended, now, "done in")
            self._open[lane] = _Step(message, started=now, last_line=now)
            self._write(self._prefix + message)

    def done(self, lane: str, message: str) -> None:
        """End ``lane``'s step and write ``message`` as its last word (no step runs on)."""
        with self._lock:
            self._end(lane, self._clock(), "done in")
            self._write(self._prefix + message)

    def update(self, lane: str, message: str) -> None:
        """News of ``lane``'s running step (bench's request counts): its heartbeat and its end
        line say ``message`` from now on; nothing is written now."""
        with self._lock:
            current = self._open.get(lane)
            if current is not None:
                current.message = message
                return
        self.step(lane, message)

    def beat(self) -> None:
        """A line for each step that ran ``heartbeat_s`` since its last line."""
        with self._lock:
            now = self._clock()
            for current in self._open.values():
                if now - current.last_line >= self._heartbeat_s:
                    current.last_line = now
                    running = now - current.started
                    self._write(
                        f"{self._prefix}{current.message}: still running after {running:.0f}s"
                    )

    def close(self, failure: BaseException | None = None) -> None:
        """End every open step: done, or failed (interrupted) with the block's exception."""
        if failure is None:
            verb = "done in"
        elif isinstance(failure, KeyboardInterrupt):
            verb = "interrupted after"
        else:
            verb = "failed after"
        with self._lock:
            now = self._clock()
            for lane in list(self._open):
                self._end(lane, now, verb)

    def _end(self, lane: str, now: float, verb: str) -> None:
        ended = self._open.pop(lane, None)
        if ended is not None:
            self._write(f"{self._prefix}{ended.message}: {verb} {now - ended.started:.1f}s")


def step_key(message: str) -> str:
    """What names a step: its words before a parenthesised number or a ``|`` detail."""
    return message.split(" | ", 1)[0].split(" (", 1)[0].strip()


class Heartbeat:
    """Calls ``beat`` every ``tick_s`` from a daemon thread until ``stop``."""

    def __init__(self, beat: Callable[[], None], tick_s: float = 1.0) -> None:
        self._beat, self._tick_s = beat, tick_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="progress-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self._tick_s):
            self._beat()

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()
