"""One writer per container: every command that changes a container (launch, stop, restart,
drafter push, drafter train, up) holds the container's lock for its run.

The lock is ``flock`` on ``/var/lib/dflashops/lock`` in the container, held by a shell that this
command keeps open over SSH (:meth:`dflashops.remote.SshConnection.hold`): when the command ends
— done, failed, Ctrl-C, killed — its SSH session closes and the kernel releases the lock, so a
lock never outlives its holder by more than the time sshd takes to see the session gone. The
holder writes who it is beside it (``launch by pid N since T on HOST``): a second command says
that and exits, or waits with ``--wait``. A holder on this machine whose pid is dead (its link
was cut, so sshd has not noticed yet) is stale: its shell in the container is ended and the lock
taken over, with a warning.

Nested use on one connection (``up`` holds it for a pair; its launch, push and bench run inside)
takes nothing more.
"""

from __future__ import annotations

import os
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.errors import DflashopsError
from dflashops.progress import Say, quiet
from dflashops.remote import HeldCommand, SshConnection

WAIT_POLL_S = 2.0
DEFAULT_WAIT_S = 3600.0
_held: dict[int, str] = {}  # id(connection) -> the command holding the lock over it
_held_lock = threading.Lock()


class ContainerBusy(DflashopsError):
    """Another command changes the container now."""


@dataclass(frozen=True)
class Holder:
    """Who holds a container's lock, as the holder wrote it."""

    command: str
    pid: int
    host: str
    since: str
    shell: int  # the holding shell's pid in the container

    def line(self) -> str:
        return f"{self.command} by pid {self.pid} since {self.since} on {self.host}"

    def text(self) -> str:
        return f"{self.command}\t{self.pid}\t{self.host}\t{self.since}"

    @classmethod
    def parse(cls, text: str) -> Holder | None:
        parts = text.strip().split("\t")
        if len(parts) != 5:
            return None
        command, pid, host, since, shell = parts
        if not (pid.isdigit() and shell.isdigit()):
            return None
        return cls(command, int(pid), host, since, int(shell))

    def stale(self) -> bool:
        """The holder ran here and its process is gone."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def lock_script(layout: Layout, info: str) -> str:
    """Take the lock without waiting: ``locked`` then hold it until stdin closes; else
    ``busy <holder>``; ``noflock`` where the container has no ``flock``."""
    q = shlex.quote
    lock, holder = q(f"{layout.state}/lock"), q(f"{layout.state}/lock.holder")
    return "\n".join(
        [
            "command -v flock >/dev/null 2>&1 || { echo noflock; exit 0; }",
            f"mkdir -p {q(layout.state)} && exec 9>>{lock}",
            "if flock -n 9; then",
            f"  printf '%s\\t%s\\n' {q(info)} \"$$\" > {holder}",
            "  echo locked; cat >/dev/null",  # held while our session stays open
            f"  : > {holder}",
            "else",
            f'  echo "busy $(head -c 400 {holder} 2>/dev/null)"',
            "fi",
        ]
    )


@contextmanager
def container_lock(
    conn: SshConnection,
    container: str,
    command: str,
    *,
    wait_s: float | None = None,
    say: Say = quiet,
    warn: Say = quiet,
    layout: Layout = DEFAULT_LAYOUT,
) -> Iterator[None]:
    """Hold ``container``'s lock for the block (see the module). ``wait_s``: wait that long for
    a busy lock (None: fail at once with :class:`ContainerBusy`)."""
    key = id(conn)
    with _held_lock:
        nested = key in _held  # the outer command holds it
    if nested:
        yield
        return
    held = _acquire(conn, container, command, wait_s=wait_s, say=say, warn=warn, layout=layout)
    with _held_lock:
        _held[key] = command
    try:
        yield
    finally:
        with _held_lock:
            _held.pop(key, None)
        if held is not None:
            held.release()


def _acquire(
    conn: SshConnection,
    container: str,
    command: str,
    *,
    wait_s: float | None,
    say: Say,
    warn: Say,
    layout: Layout,
) -> HeldCommand | None:
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    info = f"{command}\t{os.getpid()}\t{socket.gethostname()}\t{since}"
    started = time.monotonic()
    while True:
        held = conn.hold(lock_script(layout, info), display=f"lock {container}")
        first = held.first_line
        if first == "locked":
            return held
        held.release()
        if first == "noflock":
            warn(f"{container} has no flock (util-linux): {command} runs without the lock")
            return None
        holder = Holder.parse(first.removeprefix("busy").strip())
        if holder is not None and holder.stale():
            warn(
                f"{container}: the lock of {holder.line()} is stale (that process is gone): "
                "taken over"
            )
            conn.run(f"kill {holder.shell} 2>/dev/null; sleep 0.5", ok_codes=None, deadline=30)
            continue
        who = holder.line() if holder else "another command"
        if wait_s is None:
            raise ContainerBusy(
                f"{container} is busy: {who}",
                hint="wait for it, or rerun with --wait to queue behind it",
            )
        waited = time.monotonic() - started
        if waited > wait_s:
            raise ContainerBusy(
                f"{container} is still busy after {wait_s:.0f}s: {who}",
                hint="rerun once it is done, or with a longer --wait-timeout",
            )
        say(f"waiting for {container}: {who} ({waited:.0f}s)")
        time.sleep(WAIT_POLL_S)
