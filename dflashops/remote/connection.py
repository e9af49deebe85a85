"""The one SSH connection dflashops uses: Fabric underneath, with the rules we need on top.

* Host keys are checked against a known_hosts file (``~/.ssh/known_hosts`` unless given). An
  unknown key is refused unless ``accept_new_host_key`` is set, which records it; a changed key
  is always refused.
* Every operation has a deadline. An open channel on a cut link blocks forever (invoke's own
  timeout does not help), so the operation runs in a worker thread and, when the deadline
  passes, the transport is shut down and :class:`RemoteDeadlineError` raised.
* Only connection setup is retried (with backoff); a command runs once, since it may change state.
* :meth:`SshConnection.run` raises :class:`RemoteCommandError` (host, command, exit code, stderr
  tail) unless the exit code is in ``ok_codes``; :meth:`SshConnection.probe` accepts any.
* Commands are logged at INFO, their output at DEBUG, on ``dflashops.remote``. That logger and
  the libraries' (paramiko, fabric, invoke) print nothing unless the CLI configures logging
  (``--debug``): what they would say on their own ("Socket exception: Connection reset by peer
  (104)") is in the errors raised here, as their cause.

One connection serves one thread at a time; :mod:`dflashops.remote.group` runs many in parallel.

One module, over 400 lines, on purpose: the retried connect, the worker thread that enforces a
deadline and the transport abort all share one connection's state and lock; apart, each would
reach into the others'. Host-key policies, which share nothing, live in ``host_keys``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import socket
import threading
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import paramiko
from fabric import Config, Connection
from paramiko.ssh_exception import (
    AuthenticationException,
    BadHostKeyException,
    NoValidConnectionsError,
    SSHException,
)

from dflashops.errors import DflashopsError, RemoteCommandError, RemoteError
from dflashops.inventory.models import SshAccess
from dflashops.remote.errors import HostKeyError, RemoteConnectError, RemoteDeadlineError
from dflashops.remote.host_keys import RecordNewKey, RejectUnknownKey

log = logging.getLogger("dflashops.remote")
# Nobody configures these loggers in a plain run, so logging's last resort would print their
# warnings to stderr as bare stray lines. A handler that drops records keeps it from doing so;
# --debug's root handler still gets every record.
for _name in ("dflashops.remote", "paramiko", "fabric", "invoke"):
    logging.getLogger(_name).addHandler(logging.NullHandler())

T = TypeVar("T")

DEFAULT_DEADLINE_S = 120.0
DEFAULT_CONNECT_TIMEOUT_S = 10.0
# After the transport is shut down a blocked worker normally returns within milliseconds; past
# this grace period it is abandoned (a daemon thread whose socket is already closed).
ABORT_GRACE_S = 0.5
DEFAULT_KNOWN_HOSTS = Path("~/.ssh/known_hosts")
UNKNOWN_OUTCOME_HINT = "the command may or may not have run; it is not retried automatically"


@dataclass(frozen=True)
class CommandResult:
    """What a remote command did. ``exit_code`` is -1 when it died without one (a signal)."""

    host: str
    command: str
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class HeldCommand:
    """A command left running on its own channel (:meth:`SshConnection.hold`)."""

    def __init__(self, channel: Any, first_line: str) -> None:
        self._channel = channel
        self.first_line = first_line

    def release(self) -> None:
        """Close its input and its channel: the command sees end of input and ends."""
        with contextlib.suppress(Exception):
            self._channel.shutdown_write()
        with contextlib.suppress(Exception):
            self._channel.close()


class SshConnection:
    """An SSH connection to one host (opened lazily, reopened after a failure)."""

    def __init__(
        self,
        host: str,
        *,
        port: int = 22,
        user: str = "root",
        key_file: Path | str | None = None,
        known_hosts: Path | str | None = None,
        accept_new_host_key: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT_S,
        connect_attempts: int = 3,
        backoff_s: float = 0.5,
        deadline: float = DEFAULT_DEADLINE_S,
        name: str | None = None,
    ) -> None:
        if connect_attempts < 1:
            raise ValueError("connect_attempts must be at least 1")
        self.host = host
        self.port = port
        self.user = user
        self.key_file = Path(key_file).expanduser() if key_file else None
        self.known_hosts = Path(known_hosts or DEFAULT_KNOWN_HOSTS).expanduser()
        self.accept_new_host_key = accept_new_host_key
        self.connect_timeout = connect_timeout
        self.connect_attempts = connect_attempts
        self.backoff_s = backoff_s
        self.deadline = deadline
        #: How errors and logs name this host.
        self.name = name or (host if port == 22 else f"{host}:{port}")
        self._conn: Any = None  # fabric.Connection once open

    @classmethod
    def from_access(
        cls, access: SshAccess, *, host: str | None = None, **options: Any
    ) -> SshConnection:
        """A connection from the inventory's SSH settings.

        ``host`` overrides ``access.host``; ``options`` are :class:`SshConnection` keywords and
        override the inventory's values too.
        """
        address = host or access.host
        if not address:
            raise RemoteConnectError("no SSH host given", host="?", hint="set ssh.host")
        settings: dict[str, Any] = {
            "port": access.port,
            "user": access.user,
            "key_file": access.key_file,
            "known_hosts": access.known_hosts,
            "accept_new_host_key": access.accept_new_host_key,
        }
        settings.update(options)  # explicit options win over the inventory's
        return cls(address, **settings)

    # ----------------------------------------------------------------------- connection

    @property
    def is_open(self) -> bool:
        return self._conn is not None and bool(self._conn.is_connected)

    def open(self, *, deadline: float | None = None) -> None:
        """Connect (if not connected), retrying refused or timed-out attempts with backoff.

        Host key and authentication failures are not retried. ``deadline`` bounds all attempts
        together (the connection's default when None).
        """
        budget = self.deadline if deadline is None else deadline
        self._open_by(time.monotonic() + budget, budget)

    def _open_by(self, end: float, budget: float) -> None:
        if self.is_open:
            return
        self.close()
        operation = f"connect to {self.name}"
        for attempt in range(1, self.connect_attempts + 1):
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise RemoteDeadlineError(operation, host=self.name, deadline_s=budget)
            timeout = min(self.connect_timeout, remaining)
            # TCP connect, banner and authentication are each bounded by ``timeout``
            bound = min(3 * timeout + 1.0, remaining)
            cancelled = threading.Event()
            try:
                self._conn = self.call(
                    operation,
                    functools.partial(self._connect, timeout, cancelled),
                    bound,
                    on_timeout=cancelled.set,
                )
                return
            except RemoteConnectError as exc:
                exc.attempts = attempt
                if not exc.retryable or attempt == self.connect_attempts:
                    raise
                error: RemoteError = exc
            except RemoteDeadlineError as exc:
                if time.monotonic() >= end:
                    raise RemoteDeadlineError(operation, host=self.name, deadline_s=budget) from exc
                if attempt == self.connect_attempts:
                    raise RemoteConnectError(
                        f"connect timed out after {bound:g} s",
                        host=self.name,
                        retryable=True,
                        attempts=attempt,
                    ) from exc
                error = exc
            delay = min(self.backoff_s * 2 ** (attempt - 1), max(end - time.monotonic(), 0.0))
            log.info(
                "%s: connect attempt %d failed (%s), retrying", self.name, attempt, error.message
            )
            time.sleep(delay)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def __enter__(self) -> SshConnection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _connect(self, timeout: float, cancelled: threading.Event) -> Any:
        connect_kwargs: dict[str, Any] = {
            "timeout": timeout,
            "banner_timeout": timeout,
            "auth_timeout": timeout,
            "channel_timeout": timeout,
        }
        if self.key_file is not None:
            connect_kwargs.update(
                key_filename=str(self.key_file), look_for_keys=False, allow_agent=False
            )
        # An empty SSH config: ~/.ssh/config must not redirect a host the inventory names.
        config = Config(ssh_config=paramiko.SSHConfig(), overrides={"load_ssh_configs": False})
        conn = Connection(
            self.host, user=self.user, port=self.port, config=config, connect_kwargs=connect_kwargs
        )
        # Fabric defaults to AutoAddPolicy; we verify.
        conn.client = paramiko.SSHClient()
        if self.known_hosts.exists():
            conn.client.get_host_keys().load(str(self.known_hosts))
        if self.accept_new_host_key:
            conn.client.set_missing_host_key_policy(RecordNewKey(self.known_hosts, self.name))
        else:
            conn.client.set_missing_host_key_policy(RejectUnknownKey(self.known_hosts, self.name))
        try:
            conn.open()
        except DflashopsError:
            conn.close()
            raise
        except BadHostKeyException as exc:
            conn.close()
            raise HostKeyError(
                f"host key {exc.key.get_name()} {exc.key.fingerprint} does not match "
                f"{self.known_hosts} (expected {exc.expected_key.fingerprint})",
                host=self.name,
                known_hosts=str(self.known_hosts),
                hint="a changed host key is never accepted; if the host was reinstalled, "
                f"remove its line from {self.known_hosts}",
            ) from None
        except AuthenticationException as exc:
            transport = conn.client.get_transport()
            dropped = transport is None or not transport.is_active()
            conn.close()
            if dropped:  # the server went away during authentication: not a key problem
                raise RemoteConnectError(
                    f"connection lost during authentication ({exc})",
                    host=self.name,
                    retryable=True,
                ) from None
            raise RemoteConnectError(
                f"authentication as {self.user} failed ({exc})",
                host=self.name,
                hint=f"check the key file {self.key_file}" if self.key_file else None,
            ) from None
        except (NoValidConnectionsError, SSHException, OSError, EOFError) as exc:
            conn.close()
            raise RemoteConnectError(
                f"cannot connect: {_describe(exc)}", host=self.name, retryable=True
            ) from None
        if cancelled.is_set():  # the caller gave up on this attempt: do not leak the session
            conn.close()
            raise RemoteConnectError("connect abandoned", host=self.name, retryable=True)
        _send_at_once(conn)
        return conn

    # ----------------------------------------------------------------------- operations

    def call(
        self,
        operation: str,
        fn: Callable[[], T],
        deadline: float | None = None,
        *,
        on_timeout: Callable[[], None] | None = None,
        started: float | None = None,
    ) -> T:
        """Run ``fn`` under a deadline; past it, shut the transport down and raise.

        The building block for everything remote: ``fn`` runs in a worker thread so that the
        caller always gets control back, even when a read on a dead link never returns.
        ``on_timeout`` replaces the default reaction (closing this connection's transport);
        ``started`` (a :func:`time.monotonic` value) counts time already spent, e.g. connecting.
        """
        limit = self.deadline if deadline is None else deadline
        end = (time.monotonic() if started is None else started) + limit
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["value"] = fn()
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc

        worker = threading.Thread(target=work, name=f"dflashops-remote {self.name}", daemon=True)
        worker.start()
        worker.join(max(end - time.monotonic(), 0.0))
        if worker.is_alive():
            log.warning("%s: %s: deadline of %g s exceeded, closing", self.name, operation, limit)
            (on_timeout or self._abort)()
            worker.join(ABORT_GRACE_S)
            raise RemoteDeadlineError(operation, host=self.name, deadline_s=limit)
        if "error" in outcome:
            raise outcome["error"]
        value: T = outcome["value"]
        return value

    def run(
        self,
        command: str,
        *,
        ok_codes: Collection[int] | None = (0,),
        deadline: float | None = None,
        stdin: str | None = None,
        display: str | None = None,
    ) -> CommandResult:
        """Run ``command`` in the remote user's shell.

        Raises :class:`RemoteCommandError` unless the exit code is in ``ok_codes`` (``None``
        accepts any), :class:`RemoteDeadlineError` past the deadline and :class:`RemoteError`
        when the connection drops. ``display`` names a long script in logs and errors.
        """
        shown = display or command
        started = time.monotonic()
        self._open_by(*self._budget(deadline, started))
        log.info("%s: $ %s", self.name, shown)
        if display:
            log.debug("%s: script for %s:\n%s", self.name, display, command)
        conn = self._conn

        def execute() -> Any:
            in_stream: Any = io.StringIO(stdin) if stdin is not None else False
            return conn.run(command, hide=True, warn=True, pty=False, in_stream=in_stream)

        try:
            raw = self.call(f"`{shown}`", execute, deadline, started=started)
        except DflashopsError:
            raise
        except Exception as exc:
            self.close()
            raise RemoteError(
                f"`{shown}`: connection lost ({_describe(exc)})",
                host=self.name,
                hint=UNKNOWN_OUTCOME_HINT,
            ) from exc
        if raw.exited == -1 and not _transport_alive(conn):
            lost = _loss(conn)  # before closing, which drops the transport
            self.close()
            raise RemoteError(
                f"`{shown}`: connection lost before the command finished ({lost})",
                host=self.name,
                hint=UNKNOWN_OUTCOME_HINT,
            )
        result = CommandResult(
            host=self.name,
            command=shown,
            exit_code=raw.exited,
            stdout=raw.stdout,
            stderr=raw.stderr,
            duration_s=time.monotonic() - started,
        )
        _log_output(result)
        if ok_codes is not None and result.exit_code not in ok_codes:
            raise RemoteCommandError(
                host=self.name,
                command=shown,
                exit_code=result.exit_code,
                stderr=result.stderr,
                stdout=result.stdout,
            )
        return result

    def hold(
        self, command: str, *, deadline: float | None = None, display: str | None = None
    ) -> HeldCommand:
        """Start ``command`` and keep it running: returns once it printed its first line (within
        ``deadline``); it runs until :meth:`HeldCommand.release` closes its channel, or this
        connection ends. What a lock needs: the remote side lets go when we do, however we go.
        """
        shown = display or command
        started = time.monotonic()
        self._open_by(*self._budget(deadline, started))
        log.info("%s: $ %s (held)", self.name, shown)
        transport = self._conn.client.get_transport()

        def begin() -> HeldCommand:
            channel = transport.open_session()
            channel.exec_command(command)
            first = channel.makefile("r").readline()
            return HeldCommand(channel, str(first).strip())

        try:
            return self.call(f"`{shown}`", begin, deadline, started=started)
        except DflashopsError:
            raise
        except Exception as exc:
            self.close()
            raise RemoteError(
                f"`{shown}`: connection lost ({_describe(exc)})", host=self.name
            ) from exc

    def probe(self, command: str, *, deadline: float | None = None) -> CommandResult:
        """Run a command whose exit code is an answer, not a failure (any code is returned)."""
        return self.run(command, ok_codes=None, deadline=deadline)

    def sftp(self, operation: str, fn: Callable[[Any], T], deadline: float | None = None) -> T:
        """Run ``fn(sftp_client)`` under a deadline (a paramiko ``SFTPClient``)."""
        started = time.monotonic()
        self._open_by(*self._budget(deadline, started))
        conn = self._conn
        try:
            return self.call(operation, lambda: fn(conn.sftp()), deadline, started=started)
        except DflashopsError:
            raise
        except OSError:
            if _transport_alive(conn):
                raise  # a file-level error (no such file, permission): the caller's to judge
            lost = _loss(conn)  # before closing, which drops the transport
            self.close()
            raise RemoteError(f"{operation}: connection lost ({lost})", host=self.name) from None
        except (SSHException, EOFError) as exc:
            self.close()
            raise RemoteError(
                f"{operation}: connection lost ({_describe(exc)})", host=self.name
            ) from exc

    def _budget(self, deadline: float | None, started: float) -> tuple[float, float]:
        """(end time, seconds) of an operation's budget."""
        budget = self.deadline if deadline is None else deadline
        return started + budget, budget

    def _abort(self) -> None:
        """Shut the transport down so every blocked read/write on it returns."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        transport = conn.client.get_transport()
        if transport is not None:
            with contextlib.suppress(OSError):
                transport.sock.shutdown(socket.SHUT_RDWR)
        # close() may take locks a blocked thread holds: never wait on it here
        threading.Thread(target=_close_quietly, args=(conn,), daemon=True).start()

    def __repr__(self) -> str:
        return f"SshConnection({self.user}@{self.host}:{self.port})"


def _transport_alive(conn: Any) -> bool:
    transport = conn.client.get_transport()
    return transport is not None and bool(transport.is_active())


def _loss(conn: Any) -> str:
    """Why the transport under ``conn`` ended, from the exception that ended paramiko's thread
    ("connection reset by peer")."""
    transport = conn.client.get_transport()
    cause = getattr(transport, "saved_exception", None)
    if isinstance(cause, EOFError) or (transport is not None and cause is None):
        return "closed by the host"
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror[0].lower() + cause.strerror[1:]
    return _describe(cause) if cause is not None else "closed"


def _close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.close()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _log_output(result: CommandResult) -> None:
    if not log.isEnabledFor(logging.DEBUG):
        return
    log.debug("%s: exit %d after %.2f s", result.host, result.exit_code, result.duration_s)
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        for line in text.splitlines():
            log.debug("%s: %s: %s", result.host, stream, line)


def _send_at_once(conn: Any) -> None:
    """Send every SSH packet at once. paramiko leaves Nagle's algorithm on, so of two small
    writes in a row (a channel's exec request after its open) the second waits for the peer's
    delayed ACK: 40 ms more for every command on a Linux peer (OpenSSH's client turns it off)."""
    transport = conn.client.get_transport()
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket):  # not a ProxyCommand's pipe
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
