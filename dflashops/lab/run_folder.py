"""Removing the lab's run folder safely (``lab down``).

The lab daemon stages bind mounts of this machine's vLLM venv, models and base Python under
``<run>/mnt`` (containers mount a private ``/root``, so they see the staged copies). A plain
``rmtree`` of the run folder over a bind that is still mounted deletes the real files behind it:
this happened once (a daemon that lost its state folder, and a second lab on the same run
folder), deleting the interpreter of every venv on the machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from dflashops.lab.errors import LabError


def daemon_using(run: Path) -> int | None:
    """The pid of a live lab daemon whose run folder is ``run`` (another lab's, or ours that
    lost its state folder), read from each process's environment."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if b"dflashops.lab.daemon" not in cmdline:
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"DFLASHOPS_LAB_RUN={run}".encode() in environ:
            return int(proc.name)
    return None


def mounts_below(folder: Path) -> list[Path]:
    """Mount points at or below ``folder`` (this mount namespace), deepest first."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    found = set()
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        point = Path(_unescape(fields[4]))
        if point == folder or point.is_relative_to(folder):
            found.add(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def mounts_using(folder: Path, mountinfo: str | None = None) -> list[Path]:
    """Mount points at or below ``folder``, and bind mounts anywhere whose source lies there (a
    lab's staged bind of a runtime, in this mount namespace): deleting ``folder`` would pull the
    files out from under them. ``mountinfo`` is ``/proc/self/mountinfo``'s text (read when None).

    A bind's source shows as the mount's root within its filesystem, which is the host path for
    a folder on ``/``; on another filesystem it is relative to that filesystem's root, so a folder
    there may be reported in use when it is not: the safe side for a removal."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return []
    found = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        root, point = (Path(_unescape(f)) for f in fields[3:5])
        if point.is_relative_to(folder) or (root != Path("/") and root.is_relative_to(folder)):
            found.append(point)
    return found


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def remove_run_folder(run: Path) -> None:
    """Remove the run folder, never through a mount point: the staged binds below it are this
    machine's vLLM venv, models and Python (read-write binds of them), and ``rmtree`` over one
    deletes the real thing. A daemon that died without unmounting leaves them there."""
    for point in mounts_below(run):
        subprocess.run(["umount", "-l", str(point)], check=False, timeout=15)
    left = mounts_below(run)
    if left:
        raise LabError(
            f"{left[0]} is still mounted; not removing {run}",
            hint=f"umount {left[0]} and run `lab down` again",
        )
    shutil.rmtree(run, ignore_errors=True)
