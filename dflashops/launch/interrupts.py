"""Ctrl-C while a launch changes a container: the steps that must not be cut in half finish
first, and the interrupt is raised once they are done.

Only the main thread receives SIGINT (Python raises :class:`KeyboardInterrupt` there), so only
there is anything deferred; elsewhere (``up``'s pairs run in threads and stop at their own safe
points) the block simply runs.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from dflashops.progress import Say, quiet


@contextmanager
def deferred_interrupts(say: Say = quiet, why: str = "") -> Iterator[None]:
    """Run the block to its end even when Ctrl-C comes meanwhile; then raise the interrupt.
    ``why`` is said when one is held back (what the block is finishing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        if not caught and why:
            say(f"Ctrl-C: {why} first")
        caught.append(signum)

    previous = signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt
