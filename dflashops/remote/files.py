"""Atomic file updates on a remote host, and small readers.

A put never leaves a partial or corrupt target, whatever happens to the link or the host:

1. one probe reads each target's mode and sha256 (and removes temp files an interrupted earlier
   put left behind) and the room on each target's filesystem; files whose content and mode
   already match are not sent again, and an upload that does not fit is refused before a byte
   is written (:class:`RemoteDiskFullError`);
2. the new content goes over SFTP to a temp file in the target's directory;
3. one shell script (immune to a dropped connection: it ignores SIGHUP and SIGPIPE) checks each
   temp's sha256, fsyncs it, keeps the old file as ``<file>.<UTC timestamp>.bak`` (a hard link,
   so the target never goes missing), renames the temp over the target (``rename(2)``: atomic),
   prunes backups to the newest five and fsyncs the directories.

With several files (:func:`put_files`) every temp is uploaded and verified before the first
rename; if a rename fails the script puts every old version back (and removes files it
created), so either all new versions are in place or none. A host that crashes in the
milliseconds between two renames can leave some renamed; the backups are there to see and
rerunning the put converges. A failed upload or commit removes its temps and looks at the
room again: a disk that filled up meanwhile is reported as full, not as a corrupted transfer.
"""

from __future__ import annotations

import hashlib
import posixpath
import secrets
import shlex
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dflashops.errors import RemoteError
from dflashops.remote.connection import SshConnection
from dflashops.remote.errors import RemoteTransferError
from dflashops.remote.space import ROOM_MARK, disk_full, parse_rooms, room_script, shortfall

BACKUPS_KEPT = 5
CHUNK = 256 * 1024
TEMP_MARK = ".dfo-"
_EXIT_CORRUPT = 98
_EXIT_ROLLED_BACK = 97


@dataclass(frozen=True)
class FileUpload:
    """One file for :func:`put_files`: content (bytes or a local file), path and mode."""

    path: str
    data: bytes | Path
    mode: int = 0o644


@dataclass(frozen=True)
class PutResult:
    """What a put did to one file."""

    host: str
    path: str
    sha256: str
    changed: bool
    created: bool = False
    bytes_sent: int = 0
    backup: str | None = None  # where the replaced version was kept


@dataclass(frozen=True)
class _Plan:
    upload: FileUpload
    sha256: str
    size: int
    exists: bool
    same_content: bool
    same_mode: bool
    temp: str

    @property
    def needs_upload(self) -> bool:
        return not self.same_content


def put_atomic(
    conn: SshConnection,
    data: bytes | Path,
    remote_path: str,
    mode: int = 0o644,
    *,
    deadline: float | None = None,
) -> PutResult:
    """Put ``data`` at ``remote_path`` atomically (see the module docs); unchanged: not sent."""
    return put_files(conn, [FileUpload(remote_path, data, mode)], deadline=deadline)[0]


def put_files(
    conn: SshConnection, files: Sequence[FileUpload], *, deadline: float | None = None
) -> list[PutResult]:
    """Put several files as one transaction: all new versions end up in place, or none.

    Each remote step (probe, upload, commit) is bounded by ``deadline`` (the connection's
    default when None). Missing parent directories are created. Raises
    :class:`RemoteDiskFullError` when a target's filesystem has no room for the upload (found
    before it, or after it failed), :class:`RemoteTransferError` when a file was corrupted in
    transit or a rename failed (all targets are then as before, temps removed),
    :class:`~dflashops.errors.RemoteError` when the connection fails (targets are as before, or,
    if it dropped during the final step, all new).
    """
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise ValueError(f"duplicate paths in one transaction: {paths}")
    for path in paths:
        if not posixpath.isabs(path) or path.endswith("/"):
            raise ValueError(f"remote path must be an absolute file path, not {path!r}")
    plans = _plan(conn, files, deadline)
    results = {p.upload.path: _unchanged(conn, p) for p in plans if p.same_content}
    to_chmod = [p for p in plans if p.same_content and not p.same_mode]
    if to_chmod:
        conn.run(
            " && ".join(f"chmod {p.upload.mode:o} {shlex.quote(p.upload.path)}" for p in to_chmod),
            deadline=deadline,
            display="chmod " + " ".join(p.upload.path for p in to_chmod),
        )
        for p in to_chmod:
            results[p.upload.path] = PutResult(conn.name, p.upload.path, p.sha256, changed=True)
    changed = [p for p in plans if p.needs_upload]
    if changed:
        try:
            _upload(conn, changed, deadline)
            backups = _commit(conn, changed, deadline)
        except RemoteTransferError as exc:
            raise _full_disk(conn, changed, deadline) or exc from None
        for p in changed:
            results[p.upload.path] = PutResult(
                conn.name,
                p.upload.path,
                p.sha256,
                changed=True,
                created=not p.exists,
                bytes_sent=p.size,
                backup=backups.get(p.upload.path),
            )
    return [results[path] for path in paths]


def sha256_remote(conn: SshConnection, path: str, *, deadline: float | None = None) -> str | None:
    """The sha256 of a remote regular file, or None when it does not exist."""
    q = shlex.quote(path)
    script = f"if [ -f {q} ]; then sha256sum < {q}; elif [ -e {q} ]; then exit 3; fi"
    result = conn.probe(script, deadline=deadline)
    if result.exit_code == 3:
        raise RemoteError(f"{path} is not a regular file", host=conn.name)
    if result.exit_code != 0:
        raise RemoteError(f"cannot hash {path}: {result.stderr.strip()}", host=conn.name)
    digest = result.stdout.split()
    return digest[0] if digest else None


def get_bytes(
    conn: SshConnection,
    path: str,
    *,
    max_bytes: int = 64 * 1024 * 1024,
    deadline: float | None = None,
) -> bytes:
    """The content of a remote file (over SFTP). Refuses files larger than ``max_bytes``."""

    def read(sftp: Any) -> bytes:
        with sftp.open(path, "rb") as handle:
            size = handle.stat().st_size
            if size > max_bytes:
                raise RemoteError(f"{path} is {size} bytes, over {max_bytes}", host=conn.name)
            handle.prefetch(size)
            data: bytes = handle.read(size)
            return data

    try:
        return conn.sftp(f"read {path}", read, deadline)
    except OSError as exc:
        raise RemoteError(f"cannot read {path}: {exc.strerror or exc}", host=conn.name) from None


def get_text(
    conn: SshConnection, path: str, *, encoding: str = "utf-8", deadline: float | None = None
) -> str:
    """The content of a remote text file."""
    return get_bytes(conn, path, deadline=deadline).decode(encoding)


# --------------------------------------------------------------------------- steps


def _plan(conn: SshConnection, files: Sequence[FileUpload], deadline: float | None) -> list[_Plan]:
    """Local hashes plus one remote probe for every target's mode and hash."""
    lines = ["LC_ALL=C; export LC_ALL"]
    dirs = sorted({posixpath.dirname(f.path) for f in files})
    lines.append("mkdir -p -- " + " ".join(shlex.quote(d) for d in dirs))
    for f in files:
        q = shlex.quote(f.path)
        # temps of an interrupted earlier put (one writer per file is assumed)
        stale = shlex.quote(_temp_prefix(f.path)) + "*.tmp"
        lines.append(
            f"rm -f -- {stale}; "
            f'if [ -f {q} ]; then echo "file $(stat -c %a {q}) $(sha256sum < {q} | cut -c1-64)"; '
            f"elif [ -e {q} ]; then echo other; else echo absent; fi"
        )
    lines.append(room_script(dirs))
    probe = conn.run(
        "\n".join(lines),
        deadline=deadline,
        display="stat " + " ".join(f.path for f in files),
    )
    output = probe.stdout.splitlines()
    states = [line for line in output if not line.startswith(f"{ROOM_MARK} ")]
    rooms = parse_rooms(output, dirs)
    if len(states) != len(files):
        raise RemoteError(f"unexpected probe output: {probe.stdout!r}", host=conn.name)
    plans = []
    for f, state in zip(files, states, strict=True):
        kind, *rest = state.split()
        if kind == "other":
            raise RemoteTransferError(
                f"{f.path} exists and is not a regular file", host=conn.name, paths=[f.path]
            )
        digest, size = _local_digest(f.data)
        exists = kind == "file"
        plans.append(
            _Plan(
                upload=f,
                sha256=digest,
                size=size,
                exists=exists,
                same_content=exists and rest[1] == digest,
                same_mode=exists and int(rest[0], 8) == f.mode,
                temp=f"{_temp_prefix(f.path)}{secrets.token_hex(6)}.tmp",
            )
        )
    short = shortfall(rooms, _needs(plans))
    if short is not None:
        raise disk_full(conn.name, [f.path for f in files], short, during_upload=False)
    return plans


def _needs(plans: Sequence[_Plan]) -> dict[str, int]:
    """Bytes an upload writes, per target directory."""
    needs: dict[str, int] = {}
    for p in plans:
        if p.needs_upload:
            directory = posixpath.dirname(p.upload.path)
            needs[directory] = needs.get(directory, 0) + p.size
    return needs


def _full_disk(
    conn: SshConnection, plans: Sequence[_Plan], deadline: float | None
) -> RemoteTransferError | None:
    """After a failed upload or commit: remove its temps, then the full-disk error when a target
    filesystem has no room for it (another writer filled it), None when it has.

    The targets are as before either way (the commit restores them itself)."""
    dirs = sorted({posixpath.dirname(p.upload.path) for p in plans})
    temps = " ".join(shlex.quote(p.temp) for p in plans)
    try:
        output = conn.run(
            f"LC_ALL=C; export LC_ALL\nrm -f -- {temps}\n{room_script(dirs)}",
            deadline=deadline,
            display="df " + " ".join(dirs),
        ).stdout.splitlines()
    except RemoteError:
        return None  # the link is gone too: the original error says so
    short = shortfall(parse_rooms(output, dirs), _needs(plans))
    if short is None:
        return None
    return disk_full(conn.name, [p.upload.path for p in plans], short, during_upload=True)


def _upload(conn: SshConnection, plans: Sequence[_Plan], deadline: float | None) -> None:
    def send(sftp: Any) -> None:
        for p in plans:
            with sftp.open(p.temp, "wb") as handle:
                handle.chmod(p.upload.mode)  # before any byte lands: secrets stay private
                handle.set_pipelined(True)
                for chunk in _chunks(p.upload.data):
                    handle.write(chunk)

    names = ", ".join(p.upload.path for p in plans)
    try:
        conn.sftp(f"upload {names}", send, deadline)
    except OSError as exc:
        raise RemoteTransferError(
            f"upload of {names} failed: {exc.strerror or exc}",
            host=conn.name,
            paths=[p.upload.path for p in plans],
        ) from None


def _commit(conn: SshConnection, plans: Sequence[_Plan], deadline: float | None) -> dict[str, str]:
    """Verify, fsync, back up, rename (rolling back on failure), prune; return the backups."""
    q = shlex.quote
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    backups = {p.upload.path: f"{p.upload.path}.{stamp}.bak" for p in plans}
    temps = " ".join(q(p.temp) for p in plans)
    lines = [
        "trap '' HUP PIPE",  # finish even if the client goes away mid-script
        "LC_ALL=C; export LC_ALL",
        "n=0",
        f"discard() {{ rm -f -- {temps}; }}",
    ]
    for p in plans:
        lines.append(
            f'[ "$(sha256sum < {q(p.temp)} | cut -c1-64)" = {p.sha256} ] || '
            f"{{ echo {q(f'corrupt {p.upload.path}')} >&2; discard; exit {_EXIT_CORRUPT}; }}"
        )
        lines.append(
            f"chmod {p.upload.mode:o} {q(p.temp)} && sync -- {q(p.temp)} || {{ discard; exit 1; }}"
        )
    for i, p in enumerate(plans):
        target, backup = q(p.upload.path), q(backups[p.upload.path])
        lines.append(
            f'undo_{i}() {{ if [ "$had_{i}" = 1 ]; then mv -fT -- {backup} {target}; '
            f"else rm -f -- {target}; fi; }}"
        )
    undo = " ".join(f"[ $n -gt {i} ] && undo_{i};" for i in reversed(range(len(plans))))
    lines.append(
        f'rollback() {{ echo "rename failed: $1" >&2; {undo} discard; exit {_EXIT_ROLLED_BACK}; }}'
    )
    for i, p in enumerate(plans):
        target, backup, temp = q(p.upload.path), q(backups[p.upload.path]), q(p.temp)
        lines += [
            f"had_{i}=0",
            f"if [ -f {target} ]; then had_{i}=1; "
            f"ln -f -- {target} {backup} 2>/dev/null || cp -p -- {target} {backup} "
            f"|| rollback {target}; fi",
            f'mv -fT -- {temp} {target} || {{ [ "$had_{i}" = 1 ] && rm -f -- {backup}; '
            f"rollback {target}; }}",
            f"n={i + 1}",
        ]
    for p in plans:
        lines.append(_prune_backups(p.upload.path))
    dirs = sorted({posixpath.dirname(p.upload.path) for p in plans})
    lines.append("sync -- " + " ".join(q(d) for d in dirs) + " || true")
    names = [p.upload.path for p in plans]
    result = conn.run(
        "\n".join(lines),
        ok_codes=(0, _EXIT_CORRUPT, _EXIT_ROLLED_BACK),
        deadline=deadline,
        display="commit " + " ".join(names),
    )
    if result.exit_code == _EXIT_CORRUPT:
        raise RemoteTransferError(
            f"upload arrived corrupted ({result.stderr.strip()}); targets unchanged",
            host=conn.name,
            paths=names,
        )
    if result.exit_code == _EXIT_ROLLED_BACK:
        raise RemoteTransferError(
            f"{result.stderr.strip()}; every target restored to its previous version",
            host=conn.name,
            paths=names,
        )
    return {p.upload.path: backups[p.upload.path] for p in plans if p.exists}


def _prune_backups(path: str) -> str:
    """Shell that removes all but the newest BACKUPS_KEPT ``<path>.<stamp>.bak`` files."""
    pattern = shlex.quote(path) + ".[0-9]*T[0-9]*Z.bak"
    return (
        f"set -- {pattern}; "
        f'if [ -e "$1" ] && [ $# -gt {BACKUPS_KEPT} ]; then '
        f"i=$(( $# - {BACKUPS_KEPT} )); "
        f'while [ $i -gt 0 ]; do rm -f -- "$1"; shift; i=$((i - 1)); done; fi'
    )


def _temp_prefix(path: str) -> str:
    directory, name = posixpath.split(path)
    return posixpath.join(directory, f".{name}{TEMP_MARK}")


def _unchanged(conn: SshConnection, plan: _Plan) -> PutResult:
    return PutResult(conn.name, plan.upload.path, plan.sha256, changed=False)


def _local_digest(data: bytes | Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    for chunk in _chunks(data):
        digest.update(chunk)
        size += len(chunk)
    return digest.hexdigest(), size


def _chunks(data: bytes | Path) -> Iterator[bytes]:
    if isinstance(data, bytes):
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]
        return
    with data.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            yield chunk
