"""Room for an upload on the remote filesystems that hold its targets.

Measured twice by :mod:`dflashops.remote.files`: before the upload, in the same probe that reads
the targets (so the common case fails before a byte is written), and after an upload or commit
that failed (another writer may have filled the disk in between). The second look is the only
way to tell a full disk from a corrupted transfer: paramiko drops the status of pipelined SFTP
writes, so a write that ran into ENOSPC shows up only as a temp file whose checksum is wrong.

``df``'s "available" leaves out the blocks a filesystem reserves for root: a put that would eat
into them is refused even as root, since a container whose reserve is gone breaks in other ways.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dflashops.remote.errors import RemoteDiskFullError

BLOCK = 4096  # files take whole blocks; 4 KiB is the common size (ext4, xfs, tmpfs pages)
MARGIN = 64 * 1024  # per filesystem: directory entries, extent blocks
ROOM_MARK = "room"


@dataclass(frozen=True)
class Room:
    """The filesystem holding a directory: its mount point and the bytes available on it."""

    mount: str
    free: int


def room_script(directories: Sequence[str]) -> str:
    """Shell printing one ``room <available KiB> <mount point>`` line per directory, in order.

    A directory that does not exist yet is measured at its nearest existing parent; a line
    whose numbers are missing (no ``df`` there) is skipped by :func:`parse_rooms`."""
    lines = []
    for directory in directories:
        lines.append(
            f"d={shlex.quote(directory)}; "
            'while [ ! -d "$d" ]; do d=$(dirname -- "$d"); done; '
            'df -Pk -- "$d" 2>/dev/null | '
            f'{{ read -r _; read -r _ _ _ avail _ mount; echo "{ROOM_MARK} $avail $mount"; }}'
        )
    return "\n".join(lines)


def parse_rooms(output: Sequence[str], directories: Sequence[str]) -> dict[str, Room]:
    """The rooms :func:`room_script` printed among ``output``'s lines, by directory (those
    ``df`` could not measure left out)."""
    rooms: dict[str, Room] = {}
    lines = [line for line in output if line.startswith(f"{ROOM_MARK} ")]
    if len(lines) != len(directories):
        return rooms
    for directory, line in zip(directories, lines, strict=True):
        _mark, _, rest = line.partition(" ")
        avail, _, mount = rest.partition(" ")
        if avail.isdigit() and mount:
            rooms[directory] = Room(mount, int(avail) * 1024)
    return rooms


@dataclass(frozen=True)
class Shortfall:
    """A filesystem without room for its part of an upload."""

    room: Room
    needed: int  # bytes: the files, in whole blocks, plus the margin
    directories: tuple[str, ...]  # the upload's target directories on it


def shortfall(rooms: Mapping[str, Room], needs: Mapping[str, int]) -> Shortfall | None:
    """The first filesystem without room for what ``needs`` (bytes per directory) puts on it;
    None when every measured one has room."""
    needed: dict[Room, int] = {}
    directories: dict[Room, list[str]] = {}
    for directory, size in needs.items():
        room = rooms.get(directory)
        if room is not None:
            needed[room] = needed.get(room, MARGIN) + -(-size // BLOCK) * BLOCK
            directories.setdefault(room, []).append(directory)
    for room, size in needed.items():
        if size > room.free:
            return Shortfall(room, size, tuple(directories[room]))
    return None


def disk_full(
    host: str, paths: Sequence[str], short: Shortfall, *, during_upload: bool
) -> RemoteDiskFullError:
    """The one-line error for a filesystem without room for the upload of ``paths`` (the
    transaction's; the caller has made sure each is as before and the temp files are gone)."""
    there = [p for p in paths if posixpath.dirname(p) in short.directories]
    files = there[0] if len(there) == 1 else f"{len(there)} files there"
    filled = " (it filled up during the upload)" if during_upload else ""
    room = short.room
    return RemoteDiskFullError(
        f"the filesystem at {room.mount} is full{filled}: the upload of {files} needs "
        f"{human_bytes(short.needed)}, {human_bytes(room.free)} free; nothing changed",
        host=host,
        paths=paths,
        mount=room.mount,
        free=room.free,
        needed=short.needed,
    )


def human_bytes(size: int) -> str:
    """``1536`` -> ``"1.5 KiB"``; below 1 KiB, ``"N bytes"``."""
    if size < 1024:
        return f"{size} bytes"
    value = float(size)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.0f} {unit}" if value >= 100 else f"{value:.1f} {unit}"
