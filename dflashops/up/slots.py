"""How many pairs of one ``up`` run do what at once.

Every pair's ``provision`` step runs up to the fleet's ``parallel`` at once (the inventory's, 8
unless it says otherwise: PVE work, as ``provision`` does it); the loop after it (drafter check
to report: a model loaded and served, a bench) up to 2 pairs at once. ``--parallel N`` sets both.
A pair holds its loop slot from its first step after provision to its end; one waiting for a
slot says so, and Ctrl-C ends the wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

WAIT_POLL_S = 0.5  # how often a waiting pair looks at the stop flag


class Slots:
    """The run's two bounds (see the module)."""

    def __init__(self, provision: int, loop: int) -> None:
        self.loop_size = loop
        self._provision = threading.BoundedSemaphore(provision)
        self._loop = threading.BoundedSemaphore(loop)

    @contextmanager
    def provisioning(self) -> Iterator[None]:
        with self._provision:
            yield

    def enter_loop(self, stop: threading.Event, waiting: Callable[[], None]) -> bool:
        """Take a loop slot; ``waiting()`` once when none is free. False: stopped meanwhile."""
        if self._loop.acquire(blocking=False):
            return True
        waiting()
        while not stop.is_set():
            if self._loop.acquire(timeout=WAIT_POLL_S):
                return True
        return False

    def leave_loop(self) -> None:
        self._loop.release()
