"""The one exception tree of dflashops.

Every failure a user can cause or meet is a ``DflashopsError``. The CLI turns it into one line on
stderr and exit code 1 (``--debug`` shows the traceback). Subclasses carry the context an operator
needs to act: the file and key, the host and command, the PVE status, the log tail.
"""

from __future__ import annotations

import errno
import re
import stat
import sys
from collections.abc import Sequence
from pathlib import Path


class DflashopsError(Exception):
    """Root of every error dflashops raises on purpose."""

    #: the CLI exit status for this error (1 failed, 2 usage or bad input; docs/reference.md)
    cli_exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The message as the CLI prints it: one line, with a hint when there is one."""
        # a message that reprints a hostile value (a 100,000-character path) is cut
        text = shorten(self.message, MAX_MESSAGE_CHARS)
        return f"{text} (hint: {shorten(self.hint, MAX_MESSAGE_CHARS)})" if self.hint else text


#: longest key path an error message repeats in full
MAX_KEY_CHARS = 120
#: longest message (and hint) one error line prints
MAX_MESSAGE_CHARS = 500


class ConfigError(DflashopsError):
    """A YAML document (inventory, playbook) is broken, has an unknown key or a wrong value."""

    cli_exit_code = 2  # invalid input, like Click's own usage errors

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ) -> None:
        where = source or "<input>"
        if line is not None:
            where = f"{where}:{line}"
        if key:
            # a hostile key (10,000 characters, a whole `--set` item) is named, not reprinted
            where = (
                f"{where}:{key if len(key) <= MAX_KEY_CHARS else key[: MAX_KEY_CHARS - 1] + '…'}"
            )
        super().__init__(f"{where}: {message}", hint=hint)
        self.reason = message  # without where: for a caller that names the input itself
        self.source = source
        self.line = line
        self.key = key
        self.reason = message


class InventoryError(ConfigError):
    """The inventory is invalid or names something it does not define."""


class PlaybookError(ConfigError):
    """The playbook is invalid, or a ``--set`` override does not fit it."""


class SecretError(DflashopsError):
    """A secret named by env var or file could not be read (never carries the value)."""


class UnknownNameError(InventoryError, KeyError):
    """A command named a container, node or cluster the inventory does not define."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class RemoteError(DflashopsError):
    """Something failed on a remote host (connection, transfer, deadline)."""

    def __init__(self, message: str, *, host: str, hint: str | None = None) -> None:
        super().__init__(f"{host}: {message}", hint=hint)
        self.host = host


class RemoteCommandError(RemoteError):
    """A remote command exited non-zero where success was required."""

    def __init__(
        self,
        *,
        host: str,
        command: str,
        exit_code: int | None,
        stderr: str = "",
        stdout: str = "",
        hint: str | None = None,
    ) -> None:
        tail = tail_lines(stderr or stdout, 5)
        detail = f"`{command}` exited {exit_code}"
        if tail:
            detail += f": {tail}"
        super().__init__(detail, host=host, hint=hint)
        self.command = command
        self.exit_code = exit_code
        self.stderr = stderr
        self.stdout = stdout


class ProxmoxError(DflashopsError):
    """The PVE API refused a call or a PVE task failed."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        errors: dict[str, str] | None = None,
        task_log: Sequence[str] = (),
        hint: str | None = None,
    ) -> None:
        text = f"PVE {status}: {message}" if status else f"PVE: {message}"
        if errors:
            text += " (" + "; ".join(f"{k}: {v}" for k, v in sorted(errors.items())) + ")"
        if task_log:
            text += " | task log: " + " / ".join(task_log[-3:])
        super().__init__(text, hint=hint)
        self.status = status
        self.errors = dict(errors or {})
        self.task_log = list(task_log)


class DrafterError(DflashopsError):
    """A drafter or target directory cannot be read or validated."""


class TemplateRenderError(DflashopsError):
    """A launch template failed to render (a missing value, never silently empty)."""


class ServerError(DflashopsError):
    """The inference server failed to start, died, or never became ready."""

    def __init__(
        self, message: str, *, log_tail: Sequence[str] = (), hint: str | None = None
    ) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = list(log_tail)


class BenchmarkError(DflashopsError):
    """A benchmark could not run or produced no usable result."""


class ParseError(DflashopsError):
    """A log or metrics text could not be parsed."""


class TuneInputError(DflashopsError):
    """Acceptance, step costs, bench runs or roofline inputs are inconsistent or insufficient.

    ``field`` names the input at fault (a CLI option or a report key). Rerunning with other
    inputs fixes it, so it is invalid input (exit 2).
    """

    cli_exit_code = 2

    def __init__(self, message: str, *, field: str | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.field = field


# C0 controls but whitespace, DEL and C1: a terminal acts on them (colours, cursor moves, a
# title), so a hostile value echoed in a message could rewrite what the operator sees
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters shown as ``\\xNN`` escapes."""
    return _CONTROL.sub(lambda found: f"\\x{ord(found[0]):02x}", text)


def shorten(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters, cut at a word with an ellipsis;
    control characters escaped."""
    flat = printable(" ".join(text.split()))
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:  # a word boundary not too far back; else cut inside a long token
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "\u2026"


_WARNED: set[str] = set()


def warn(message: str) -> None:
    """One ``warning: ...`` line on stderr, once per command run per message.

    Security defaults an operator must hear about (TLS unchecked, a secret file others can read)
    go through here rather than ``logging`` or ``warnings``: those may be silenced or rerouted by
    libraries (proxmoxer disables urllib3's warnings for the whole process).
    """
    if message in _WARNED:
        return
    _WARNED.add(message)
    print(f"warning: {shorten(message, 400)}", file=sys.stderr, flush=True)


def reset_warnings() -> None:
    """Forget which warnings were shown (the CLI calls it as each command starts)."""
    _WARNED.clear()


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them, else ``OSError``.

    Every reader of an operator's file uses it, so that a hostile path is a one-line error, not
    a hang: ``/dev/zero`` reports size 0 and never ends (the whole memory, then MemoryError), a
    FIFO blocks ``open()`` until someone writes. Anything but a regular file is refused before
    it is opened, and a file read past ``limit`` (it grew, or lied about its size) is refused.
    """
    if not stat.S_ISREG(path.stat().st_mode):
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", str(path))
    return data


def tail_lines(text: str, n: int) -> str:
    """The last ``n`` non-empty lines of ``text`` joined with `` / `` (for one-line messages)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " / ".join(lines[-n:])
