"""Remote failures beyond :mod:`dflashops.errors`: deadlines, host keys, transfers, groups.

All are :class:`~dflashops.errors.RemoteError` (or :class:`~dflashops.errors.DflashopsError`
for group summaries), so callers that only care that "something remote failed" catch one class.
"""

from __future__ import annotations

from collections.abc import Sequence

from dflashops.errors import DflashopsError, RemoteError


class RemoteConnectError(RemoteError):
    """No SSH session could be set up (refused, timed out, authentication failed)."""

    def __init__(
        self,
        message: str,
        *,
        host: str,
        retryable: bool = False,
        attempts: int = 1,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, host=host, hint=hint)
        #: Whether trying again may help (refused, timed out) or not (authentication).
        self.retryable = retryable
        self.attempts = attempts


class HostKeyError(RemoteConnectError):
    """The host key is unknown (and recording new keys is off) or differs from known_hosts."""

    def __init__(self, message: str, *, host: str, known_hosts: str, hint: str | None = None):
        super().__init__(message, host=host, hint=hint)
        self.known_hosts = known_hosts


class RemoteDeadlineError(RemoteError):
    """An operation did not finish in time; the connection was closed to unblock it."""

    def __init__(self, operation: str, *, host: str, deadline_s: float) -> None:
        super().__init__(
            f"{operation}: deadline exceeded ({deadline_s:g} s)",
            host=host,
            hint="the host may be unreachable or the work slow; the connection was closed "
            "(a remote command may still be running)",
        )
        self.operation = operation
        self.deadline_s = deadline_s


class RemoteTransferError(RemoteError):
    """A file transfer failed; the target files are unchanged (or fully restored)."""

    def __init__(
        self, message: str, *, host: str, paths: Sequence[str], hint: str | None = None
    ) -> None:
        super().__init__(message, host=host, hint=hint)
        self.paths = list(paths)


class RemoteDiskFullError(RemoteTransferError):
    """The filesystem holding a target has no room for the upload; nothing changed (the targets
    are as before, the temp files removed)."""

    def __init__(
        self, message: str, *, host: str, paths: Sequence[str], mount: str, free: int, needed: int
    ) -> None:
        super().__init__(
            message,
            host=host,
            paths=paths,
            hint=f"free space on {mount} (old backups *.bak, logs, caches) or grow it, then rerun",
        )
        #: the mount point of the full filesystem, as ``df`` names it on the host
        self.mount = mount
        #: bytes available there (with this upload's temp files removed)
        self.free = free
        #: bytes the upload needs there (its files, rounded up to blocks, plus a margin)
        self.needed = needed


class GroupError(DflashopsError):
    """Some hosts of a group operation failed; the others' results are kept in ``result``."""

    def __init__(self, message: str, *, failed: dict[str, Exception]) -> None:
        super().__init__(message)
        self.failed = dict(failed)
