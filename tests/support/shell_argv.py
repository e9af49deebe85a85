"""A real bash that records every command it would run, for checking command strings we build.

:class:`ShellSandbox` runs a script with real ``bash`` (the parser the remote shell uses), but:

* ``PATH`` is an empty folder and ``command_not_found_handle`` records each command's argv
  (one file per call, NUL-separated) instead of running it; read-only tools (``cat``, ``tail``,
  ``sha256sum``…) are recorded and then really run, so scripts that read their output behave;
* the builtins a value can reach (``[``, ``test``, ``echo``, ``printf``, ``cd``, ``kill``,
  ``exec``, ``.``, ``export``) are shadowed by functions that record them too (``[``/``test``,
  ``echo``/``printf`` and ``export`` then do their real work; the others do nothing);
* ``mkdir`` is recorded, then really makes the folders it names inside the sandbox (only
  there), so the script's own redirections find them;
* commands named by a path (``/venv/bin/python``) are recorded by stub executables that
  :meth:`ShellSandbox.stub` puts at those paths.

So "this value arrived as exactly one argument" is a lookup in :attr:`ShellRun.calls`, and "a
payload ran" is a call of :data:`CANARY` (a command that exists nowhere). The working folder
holds ``g1`` and ``g2`` so an unquoted ``*`` would expand.

:class:`SandboxConnection` is an :class:`SshConnection` whose transport is this sandbox: the
product functions that build a command and run it in one go are called unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.errors import RemoteCommandError
from dflashops.remote import CommandResult, SshConnection

CANARY = "dfo_canary"
# One file per call, named by time, pid and a counter: the processes of a pipeline record at
# the same time, and one append per call is not atomic once an argument holds a newline.
_RECORD = (
    "_DFO_N=0; _dfo_rec() { builtin printf '%s\\0' \"$@\" "
    '> "$DFO_ARGV_DIR/${EPOCHREALTIME/./}-$BASHPID-$((++_DFO_N))"; }'
)
# read-only tools that really run after being recorded (nothing that writes, deletes or signals)
PASSTHROUGH = (
    *("awk", "base64", "basename", "cat", "cut", "date", "dirname", "getconf", "grep", "head"),
    *("ls", "readlink", "sed", "sha1sum", "sha256sum", "sort", "stat", "tail", "tr", "wc"),
)
# hostile text: every payload tries to run CANARY, or to split, glob or look like an option
PAYLOADS = (
    "a'b",
    f"$({CANARY})",
    f"`{CANARY}`",
    f"; {CANARY}",
    f"x && {CANARY}",
    f"| {CANARY}",
    f"'; {CANARY}; '",
    f'"; {CANARY}; "',
    f"\n{CANARY}\n",
    "a b",
    "tab\there",
    "*",
    "--flag",
    "-x",
    "$HOME",
    "${IFS}",
    "a\\",
    "é✓ ünï",
    "#hash",
    "~",
)


@dataclass
class ShellRun:
    """What one script did: every recorded argv, in order, and its output."""

    calls: list[list[str]]
    stdout: str
    stderr: str
    exit_code: int

    def commands(self, name: str) -> list[list[str]]:
        return [c for c in self.calls if c and Path(c[0]).name == name]


@dataclass
class ShellSandbox:
    root: Path
    runs: list[ShellRun] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.bin = self.root / ".empty-path"
        self.log = self.root / ".argv"
        self.log.mkdir()
        self.cwd = self.root / ".cwd"
        for folder in (self.bin, self.cwd):
            folder.mkdir(parents=True, exist_ok=True)
        for name in ("g1", "g2"):
            (self.cwd / name).touch()

    def stub(self, path: str | Path) -> None:
        """A recording executable at ``path`` (for commands named by a path)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(
            "#!/bin/bash\n" + _RECORD + '\n_dfo_rec "$0" "$@"\n',
            encoding="utf-8",
        )
        target.chmod(0o755)

    def _prelude(self) -> str:
        real = " ".join(
            f"[{name}]={_single_quote(path)}"
            for name in PASSTHROUGH
            if (path := shutil.which(name)) is not None
        )
        return "\n".join(
            [
                f"_DFO_MKDIR={_single_quote(shutil.which('mkdir') or '/bin/mkdir')}",
                f"declare -A _DFO_REAL=({real})",
                f"builtin cd {_single_quote(str(self.cwd))}",
                _RECORD,
                "command_not_found_handle() {",
                '    _dfo_rec "$@"',
                '    if [[ -n "${_DFO_REAL[$1]-}" ]]; then "${_DFO_REAL[$1]}" "${@:2}"; '
                "else return 0; fi",
                "}",
                '[() { _dfo_rec [ "$@"; builtin [ "$@"; }',
                'test() { _dfo_rec test "$@"; builtin test "$@"; }',
                'echo() { _dfo_rec echo "$@"; builtin echo "$@"; }',
                'printf() { _dfo_rec printf "$@"; builtin printf "$@"; }',
                'export() { _dfo_rec export "$@"; builtin export "$@"; }',
                'cd() { _dfo_rec cd "$@"; }',
                'kill() { _dfo_rec kill "$@"; return 1; }',
                'exec() { _dfo_rec exec "$@"; }',
                # mkdir really runs for folders inside the sandbox (redirections need them)
                "mkdir() {",
                '    _dfo_rec mkdir "$@"',
                '    for a; do [[ "$a" == "$DFO_ROOT"/* && "$a" != *..* ]] && '
                '"$_DFO_MKDIR" -p -- "$a"; done',
                "    return 0",
                "}",
                '.() { _dfo_rec . "$@"; }',
                'source() { _dfo_rec source "$@"; }',
                "trap wait EXIT",  # background commands (`setsid … &`) record before bash ends
                f"PATH={_single_quote(str(self.bin))}",
                "",
            ]
        )

    def run(self, script: str, *, stdin: str | None = None, timeout: float = 10.0) -> ShellRun:
        """Run ``script`` as ``bash -c`` would on the remote side; every argv is recorded."""
        for old in self.log.iterdir():
            old.unlink()
        done = subprocess.run(
            ["/bin/bash", "--noprofile", "--norc", "-c", self._prelude() + script],
            input=(stdin or "").encode(),
            capture_output=True,
            timeout=timeout,
            check=False,
            env={
                "DFO_ARGV_DIR": str(self.log),
                "DFO_ROOT": str(self.root),
                "HOME": str(self.root),
                "LC_ALL": "C.UTF-8",
            },
        )
        run = ShellRun(
            calls=_read_calls(self.log),
            stdout=done.stdout.decode("utf-8", "surrogateescape"),
            stderr=done.stderr.decode("utf-8", "surrogateescape"),
            exit_code=done.returncode,
        )
        self.runs.append(run)
        return run

    @property
    def calls(self) -> list[list[str]]:
        """Every argv of every run so far."""
        return [call for run in self.runs for call in run.calls]


def _single_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _read_calls(folder: Path) -> list[list[str]]:
    def order(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in path.name.split("-"))

    return [
        path.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]
        for path in sorted(folder.iterdir(), key=order)
    ]


def canary_calls(calls: Iterable[list[str]]) -> list[list[str]]:
    """Calls that ran a payload: the canary as a command, or inside an ``sh -c`` script."""
    return [c for c in calls if c and Path(c[0]).name == CANARY]


def assert_arrived(calls: list[list[str]], expected: str, *, command: str | None = None) -> None:
    """``expected`` is one whole argument of some call (of ``command`` when given)."""
    pool = [c for c in calls if command is None or (c and Path(c[0]).name == command)]
    if not any(expected in call[1:] for call in pool):
        shown = "\n".join(repr(c) for c in pool[:40])
        raise AssertionError(f"{expected!r} never arrived as one argument; calls:\n{shown}")


def assert_safe(calls: list[list[str]]) -> None:
    ran = canary_calls(calls)
    if ran:
        raise AssertionError(f"a payload ran: {ran}")


class SandboxConnection(SshConnection):
    """An :class:`SshConnection` whose commands run in a :class:`ShellSandbox`, and whose SFTP
    reads and writes local files below the sandbox's root."""

    def __init__(self, sandbox: ShellSandbox) -> None:
        super().__init__("sandbox", name="sandbox", known_hosts=sandbox.root / ".known_hosts")
        self.sandbox = sandbox

    def run(
        self,
        command: str,
        *,
        ok_codes: Collection[int] | None = (0,),
        deadline: float | None = None,
        stdin: str | None = None,
        display: str | None = None,
    ) -> CommandResult:
        done = self.sandbox.run(command, stdin=stdin)
        result = CommandResult(
            host=self.name,
            command=display or command,
            exit_code=done.exit_code,
            stdout=done.stdout,
            stderr=done.stderr,
            duration_s=0.0,
        )
        if ok_codes is not None and result.exit_code not in ok_codes:
            raise RemoteCommandError(
                host=self.name,
                command=result.command,
                exit_code=result.exit_code,
                stderr=result.stderr,
                stdout=result.stdout,
            )
        return result

    def sftp(self, operation: str, fn: Any, deadline: float | None = None) -> Any:
        return fn(_LocalSftp(self.sandbox.root))


class _LocalSftp:
    """The slice of paramiko's ``SFTPClient`` that dflashops uses, on local files below
    ``root`` (uploads land in the sandbox, where the recorded script then finds them)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _inside(self, path: str) -> Path:
        local = Path(path)
        if not local.resolve().is_relative_to(self.root.resolve()):
            raise PermissionError(f"{path} is outside the sandbox")
        return local

    def open(self, path: str, mode: str = "rb") -> _LocalHandle:
        return _LocalHandle(self._inside(path).open(mode if "b" in mode else mode + "b"))

    def listdir(self, path: str) -> list[str]:
        return sorted(p.name for p in self._inside(path).iterdir())


class _LocalHandle:
    def __init__(self, handle: Any) -> None:
        self.handle = handle

    def __enter__(self) -> _LocalHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.handle.close()

    def chmod(self, mode: int) -> None:
        os.fchmod(self.handle.fileno(), mode)

    def set_pipelined(self, pipelined: bool) -> None:
        pass

    def prefetch(self, size: int | None = None) -> None:
        pass

    def stat(self) -> os.stat_result:
        return os.fstat(self.handle.fileno())

    def write(self, data: bytes) -> None:
        self.handle.write(data)

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.handle.read(size)
        return data
