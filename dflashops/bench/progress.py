"""What a benchmark tells its caller while it runs: per-level events (``Progress``), or the
project's plain ``say(message)`` callback, accepted wherever a ``Progress`` is."""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

from dflashops.bench.models import RequestRecord
from dflashops.progress import Say

__all__ = ["Progress", "QuietProgress", "SayProgress", "as_progress"]


@runtime_checkable
class Progress(Protocol):
    """What a caller may show while a benchmark runs."""

    def phase(self, message: str) -> None:
        """What the run waits for now (warm-up, settling, reading the server log)."""

    def start_level(self, concurrency: int, requests: int) -> None: ...

    def request_done(self, record: RequestRecord) -> None: ...


class QuietProgress:
    """A ``Progress`` that shows nothing."""

    def phase(self, message: str) -> None:
        pass

    def start_level(self, concurrency: int, requests: int) -> None:
        pass

    def request_done(self, record: RequestRecord) -> None:
        pass


class SayProgress:
    """A ``Progress`` that turns every event into one ``say(message)`` line."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.level = 0
        self.total = 0
        self.done = 0
        self.tokens = 0
        self.started = 0.0

    def phase(self, message: str) -> None:
        self.say(message)

    def start_level(self, concurrency: int, requests: int) -> None:
        self.level, self.total, self.done, self.tokens = concurrency, requests, 0, 0
        self.started = time.perf_counter()
        self.say(f"concurrency {concurrency}: 0/{requests} requests")

    def request_done(self, record: RequestRecord) -> None:
        self.done += 1
        self.tokens += record.output_tokens or 0
        elapsed = time.perf_counter() - self.started
        rate = f", {self.tokens / elapsed:.1f} tok/s" if elapsed > 0 else ""
        self.say(f"concurrency {self.level}: {self.done}/{self.total} requests{rate}")


def as_progress(progress: Progress | Say | None) -> Progress:
    """A ``Progress`` for any of the accepted forms (None shows nothing)."""
    if progress is None:
        return QuietProgress()
    if isinstance(progress, Progress):
        return progress
    return SayProgress(progress)
