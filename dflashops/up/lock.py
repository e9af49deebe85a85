"""One ``up`` run per pair at a time: a lock file in the pair's run folder, held with ``flock``
for the pair's whole run (reading its record, planning, every step).

``flock`` because the kernel releases it when its holder dies, however it dies (``kill -9``
included): a run that died never keeps the pair. The file's one line (``up by pid N since T on
HOST``) only says who holds it, for the "busy" message; the holder empties it before it lets
go, so a line found under a free ``flock`` was left by a run that died, and is taken over with
a warning. The file is never deleted: a run that opened it just before would lock a file that
the next run no longer sees.

A dry run takes nothing; it asks who holds the pair (:func:`holder_now`). The module imports
only the standard library and :mod:`dflashops.errors`: ``up --help`` shows its default wait.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from dflashops.errors import DflashopsError

LOCK_FILE = "up.lock"
DEFAULT_WAIT_S = 3600  # a whole up run (launch, bench, a live tune) fits in an hour
POLL_S = 1.0
# a holder writes its line just after it takes the flock, and a dry run's look holds the flock
# for an instant: a flock held with no line is looked at again this long before it counts
UNNAMED_GRACE_S = 2.0
_LINE = re.compile(r"(\S+) by pid (\d+) since (\S+) on (\S+)")

#: ``(who holds the pair, seconds waited so far)``, said once a poll while ``--wait`` waits
WaitSay = Callable[[str, float], None]


class PairBusy(DflashopsError):
    """Another run holds the pair (and this one does not wait, or waited long enough)."""

    def __init__(self, who: str, waited_s: float | None = None) -> None:
        if waited_s is None:
            super().__init__(
                f"busy: {who}",
                hint="let it finish, or pass --wait to queue behind it",
            )
        else:
            super().__init__(
                f"busy: {who}; waited {waited_s:.0f} s",
                hint="--wait-timeout SECONDS waits longer",
            )
        self.who = who


class WaitStopped(DflashopsError):
    """Ctrl-C while ``--wait`` waited for the pair."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lock, as its file says."""

    command: str
    pid: int
    since: str  # UTC, ISO 8601 without spaces: the line stays one regex
    host: str

    @classmethod
    def me(cls, command: str) -> Holder:
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return cls(command, os.getpid(), since, socket.gethostname())

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        found = _LINE.fullmatch(text.strip())
        if found is None:
            return None
        command, pid, since, host = found.groups()
        return cls(command, int(pid), since, host)

    def line(self) -> str:
        """The lock file's content."""
        return f"{self.command} by pid {self.pid} since {self.since} on {self.host}"

    def described(self) -> str:
        return f"{self.command} by pid {self.pid} since {self.since} (on {self.host})"

    def why_gone(self) -> str:
        """Why a line under a free flock names no live holder."""
        if self.host != socket.gethostname():
            return f"it ran on {self.host}, and holds the lock no more"
        if not _running(self.pid):
            return f"pid {self.pid} is not running"
        return f"pid {self.pid} holds no lock (a new process has its number)"


class PairLock:
    """A held lock; :meth:`release` (or the end of a ``with`` block) lets it go."""

    def __init__(self, path: Path, fd: int, taken_over: Holder | None) -> None:
        self.path = path
        self._fd: int | None = fd
        #: the holder whose line this run found under a free flock: it died holding the pair
        self.taken_over = taken_over

    def stale_warning(self) -> str | None:
        if self.taken_over is None:
            return None
        gone = self.taken_over
        return f"{self.path}: took over the lock of {gone.described()}: {gone.why_gone()}"

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # an empty line under a free flock: nobody died holding it
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    def __enter__(self) -> PairLock:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.release()


def take_lock(
    folder: Path,
    command: str = "up",
    *,
    wait_s: float | None = None,
    on_wait: WaitSay | None = None,
    stop: threading.Event | None = None,
    poll_s: float = POLL_S,
) -> PairLock:
    """Hold ``folder``'s lock, or :class:`PairBusy` at once (``wait_s`` None) or after
    ``wait_s`` seconds of waiting; :class:`WaitStopped` when ``stop`` is set meanwhile."""
    path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise DflashopsError(f"cannot open {path}: {exc.strerror}") from None
    try:
        _wait_for(fd, wait_s, on_wait, stop, poll_s)
        left = Holder.parse(_read(fd))
        os.ftruncate(fd, 0)
        os.pwrite(fd, (Holder.me(command).line() + "\n").encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return PairLock(path, fd, left)


def holder_now(folder: Path) -> str | None:
    """Who holds ``folder``'s lock now (None: nobody); takes nothing (a dry run)."""
    path = folder / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DflashopsError(f"cannot open {path}: {exc.strerror}") from None
    try:
        # shared: two looks never block each other, and a holder's exclusive lock blocks both
        return None if _try_flock(fd, fcntl.LOCK_SH) else _who(_read(fd))
    finally:
        os.close(fd)  # lets go of the look's flock


def _wait_for(
    fd: int,
    wait_s: float | None,
    on_wait: WaitSay | None,
    stop: threading.Event | None,
    poll_s: float,
) -> None:
    start = time.monotonic()
    while not _try_flock(fd, fcntl.LOCK_EX):
        waited = time.monotonic() - start
        text = _read(fd)
        if Holder.parse(text) is None and waited < UNNAMED_GRACE_S:
            time.sleep(0.05)
            continue
        who = _who(text)
        if wait_s is None:
            raise PairBusy(who)
        if waited >= wait_s:
            raise PairBusy(who, waited)
        if stop is not None and stop.is_set():
            raise WaitStopped(f"stopped while waiting for {who}")
        if on_wait is not None:
            on_wait(who, waited)
        pause = min(poll_s, wait_s - waited)
        if stop is not None:
            stop.wait(pause)
        else:
            time.sleep(pause)


def _try_flock(fd: int, kind: int) -> bool:
    """Take the flock of ``kind`` without blocking (closing ``fd`` lets it go); False when
    another holds it."""
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    return True


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, another user's
    try:  # a zombie has exited; only its parent has not reaped it yet
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _read(fd: int) -> str:
    return os.pread(fd, 4096, 0).decode("utf-8", "replace")


def _who(text: str) -> str:
    holder = Holder.parse(text)
    return holder.described() if holder else "another run (its lock file names no holder)"
