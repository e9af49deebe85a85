"""The server log over one watch window: the bytes written since the last window, read as
``parse-log`` reads a saved log.

SGLang exposes no spec-decode counters: its ``Decode batch`` lines carry the acceptance length
(and, without ``--enable-metrics``, the only throughput and batch numbers there are). The log
is read by byte offset (``bench.server_log``), never by time: the log's clock may differ from
ours. A line still being written at the end of a read is left for the next window, so no line
is read cut in two.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dflashops.bench.server_log import LogRead, ServerLog
from dflashops.errors import DflashopsError
from dflashops.metrics.log_models import ThroughputWindow
from dflashops.metrics.log_totals import spec_decode_totals, throughput_totals
from dflashops.metrics.logs import parse_log


@dataclass(frozen=True)
class LogNumbers:
    """What the log said over one window (None: it said nothing of that).

    ``generation_throughput`` is the mean of the window's stats lines in tok/s, summed over
    engines; ``running`` and ``waiting`` are each engine's last line, summed;
    ``acceptance_length`` is the mean of the window's spec-decode lines; ``error`` says why the
    log could not be read this window."""

    stats_lines: int = 0
    spec_decode_lines: int = 0
    generation_throughput: float | None = None
    running: int | None = None
    waiting: int | None = None
    acceptance_length: float | None = None
    acceptance_rate_pct: float | None = None
    rotated: bool = False
    """The log shrank (rotated or truncated): the window read it from its start."""
    error: str | None = None


class LogFollower:
    """Reads a server log window by window; never raises for a log it cannot read."""

    def __init__(self, log: ServerLog) -> None:
        self.log = log
        self.offset: int | None = None

    @property
    def path(self) -> str:
        return self.log.path

    def start(self) -> str | None:
        """Take the log's end as where the first window begins; the error, if any."""
        try:
            self.offset = self.log.size()
        except DflashopsError as exc:
            return exc.one_line()
        return None

    def window(self) -> LogNumbers:
        """The lines written since the last call (a log not yet found is looked for again:
        this window then begins at its end)."""
        if self.offset is None:
            problem = self.start()
            return LogNumbers(error=problem or f"{self.path}: found; read from the next window")
        try:
            read = self.log.read_from(self.offset)
        except DflashopsError as exc:
            return LogNumbers(error=exc.one_line())
        text, self.offset = complete_lines(read)
        numbers = numbers_of(text)
        return replace(numbers, rotated=True) if read.rotated else numbers


def complete_lines(read: LogRead) -> tuple[str, int]:
    """The read's text up to its last newline, and the offset the next read starts at."""
    end = read.text.rfind("\n") + 1
    if end == len(read.text) or "\ufffd" in read.text:
        # whole lines; or bytes that were not UTF-8, whose length the text no longer tells
        return read.text, read.size
    return read.text[:end], read.offset + len(read.text[:end].encode("utf-8"))


def numbers_of(text: str) -> LogNumbers:
    """The window's numbers from its log text (``parse_log`` and its totals)."""
    summary = parse_log(text)
    stats = summary.throughput_windows
    spec = summary.spec_decode_windows
    totals = spec_decode_totals(spec) if spec else None
    last = _last_per_engine(stats)
    running = [w.running for w in last if w.running is not None]
    waiting = [w.waiting for w in last if w.waiting is not None]
    return LogNumbers(
        stats_lines=len(stats),
        spec_decode_lines=len(spec),
        generation_throughput=throughput_totals(stats).mean_generation_throughput,
        running=sum(running) if running else None,
        waiting=sum(waiting) if waiting else None,
        acceptance_length=totals.mean_acceptance_length if totals else None,
        acceptance_rate_pct=totals.draft_acceptance_rate_pct if totals else None,
    )


def _last_per_engine(windows: list[ThroughputWindow]) -> list[ThroughputWindow]:
    last: dict[tuple[object, ...], ThroughputWindow] = {}
    for window in windows:
        last[(window.pid, window.process, window.engine)] = window
    return list(last.values())
