"""The same operation on several hosts in parallel, keeping every host's result or error.

A host that fails never hides the others: :class:`GroupResult` holds each host's value or
exception, ``succeeded`` and ``failed`` split them, and :meth:`GroupResult.raise_if_failed`
turns partial failure into one :class:`GroupError` naming every failed host.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from dflashops.remote.connection import CommandResult, SshConnection
from dflashops.remote.errors import GroupError

T = TypeVar("T")
MAX_PARALLEL = 16


@dataclass(frozen=True)
class HostOutcome(Generic[T]):
    """One host's share of a group operation: a value, or the exception it raised."""

    host: str
    value: T | None = None
    error: Exception | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class GroupResult(Generic[T]):
    """Every host's outcome, in the order the hosts were given."""

    outcomes: tuple[HostOutcome[T], ...]

    @property
    def succeeded(self) -> dict[str, T]:
        return {o.host: o.value for o in self.outcomes if o.error is None}  # type: ignore[misc]

    @property
    def failed(self) -> dict[str, Exception]:
        return {o.host: o.error for o in self.outcomes if o.error is not None}

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    def summary(self) -> str:
        """One line: how many succeeded, and why each failed host failed."""
        text = f"{len(self.succeeded)} of {len(self.outcomes)} hosts succeeded"
        if self.failed:
            text += "; failed: " + "; ".join(
                f"{host}: {_one_line(error)}" for host, error in self.failed.items()
            )
        return text

    def raise_if_failed(self) -> dict[str, T]:
        """The values when every host succeeded, else :class:`GroupError` listing the failures."""
        if not self.ok:
            raise GroupError(self.summary(), failed=self.failed)
        return self.succeeded


def for_each_host(
    connections: Sequence[SshConnection] | Mapping[str, SshConnection],
    operation: Callable[[SshConnection], T],
    *,
    max_parallel: int = MAX_PARALLEL,
) -> GroupResult[T]:
    """Run ``operation(conn)`` for every connection in parallel and collect every outcome.

    Each connection is used by one thread only. ``operation`` should bound itself (every
    :class:`SshConnection` call has a deadline), so the group finishes when its slowest host
    finishes or times out. Keys of a mapping name the hosts; otherwise ``conn.name`` does.
    """
    if isinstance(connections, Mapping):
        named = list(connections.items())
    else:
        named = [(conn.name, conn) for conn in connections]
    if len({name for name, _ in named}) != len(named):
        raise ValueError(f"hosts named twice: {[name for name, _ in named]}")
    if not named:
        return GroupResult(())

    def attempt(item: tuple[str, SshConnection]) -> HostOutcome[T]:
        name, conn = item
        try:
            return HostOutcome(name, value=operation(conn))
        except Exception as exc:  # kept, never lost: the caller decides
            return HostOutcome(name, error=exc)

    workers = max(1, min(max_parallel, len(named)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dflashops-group") as pool:
        return GroupResult(tuple(pool.map(attempt, named)))


def run_group(
    connections: Sequence[SshConnection] | Mapping[str, SshConnection],
    command: str,
    *,
    ok_codes: Collection[int] | None = (0,),
    deadline: float | None = None,
    max_parallel: int = MAX_PARALLEL,
) -> GroupResult[CommandResult]:
    """:meth:`SshConnection.run` on every host in parallel."""
    return for_each_host(
        connections,
        lambda conn: conn.run(command, ok_codes=ok_codes, deadline=deadline),
        max_parallel=max_parallel,
    )


def _one_line(error: Exception) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    return " ".join(str(message).split())
