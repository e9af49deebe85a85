"""A fleet: the same work on many containers at once, bounded, answered in inventory order.

``status``, ``provision``, ``destroy`` and ``up`` do each container's part in a thread of its
own, at most ``parallel`` at once (``--parallel N``, else the inventory's ``parallel``, 8 unless
it says otherwise). :func:`run_each` hands the results back in the order the containers were
given, whatever order they finish in. A container's failure is its result: the work function
turns it into one, and the other containers go on. Ctrl-C starts no container after it; those
running finish what they do (a PVE task or an SSH command is never cut in half by us) before
the interrupt goes on.

Each container's progress is a :class:`Tell`: ``tell(name, message)`` is its next step,
``tell.done(name, line)`` its last word, one line. The CLI's progress lanes
(:func:`dflashops.cli.progress.lanes`) have this shape, so a container is a lane.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Protocol, TypeVar

from dflashops.inventory.models import DEFAULT_PARALLEL, MAX_PARALLEL
from dflashops.progress import Say

T = TypeVar("T")
R = TypeVar("R")

__all__ = ["DEFAULT_PARALLEL", "MAX_PARALLEL", "QUIET", "SayTell", "Tell", "as_tell", "run_each"]
POLL_S = 0.5  # how often the waiting thread looks up (Ctrl-C lands between two looks)


class Tell(Protocol):
    """One container's progress (see the module)."""

    def __call__(self, name: str, message: str) -> None: ...

    def done(self, name: str, line: str) -> None: ...


class _Quiet:
    def __call__(self, name: str, message: str) -> None:
        """Nobody listens."""

    def done(self, name: str, line: str) -> None:
        """Nobody listens."""


QUIET: Tell = _Quiet()


class SayTell:
    """A :class:`Tell` on one progress callback (a single container's caller, ``up``'s step):
    each message as ``NAME: message``, the last line as it is."""

    def __init__(self, say: Say) -> None:
        self._say = say

    def __call__(self, name: str, message: str) -> None:
        self._say(f"{name}: {message}")

    def done(self, name: str, line: str) -> None:
        self._say(line)


def as_tell(tell: Tell | None = None, progress: Say | None = None) -> Tell:
    """``tell``, else one made of ``progress``, else nobody."""
    if tell is not None:
        return tell
    return SayTell(progress) if progress is not None else QUIET


def teller(tell: Tell, name: str) -> Say:
    """``say(message)`` for one container: its steps on its lane."""
    return lambda message: tell(name, message)


def run_each(items: Sequence[T], work: Callable[[T], R], *, parallel: int) -> list[R]:
    """``work(item)`` for every item, at most ``parallel`` at once; results in ``items``' order.

    ``work`` catches what should fail its item only. Anything it lets through is raised here
    once every item has finished (the first in order), as is Ctrl-C once those running ended.
    """
    if parallel <= 1 or len(items) <= 1:
        return [work(item) for item in items]
    workers = min(parallel, len(items))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fleet") as pool:
        futures: list[Future[R]] = [pool.submit(work, item) for item in items]
        pending = set(futures)
        try:
            while pending:
                _done, pending = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()  # not started yet: never starts
            wait([f for f in futures if not f.cancelled()])
            raise
    return [future.result() for future in futures]
