"""Is the model every member of a placement loads the same model? Checksums, compared.

Each rank of a placement loads its own slice of the weights from its own container's path, so a
member with another copy (an older download, a half-finished ``rsync``, a different quant) serves
garbage or fails deep in the load. Before the group starts, ``launch`` reads on every member the
sha256 of every file under the target's (and drafter's) folder and compares them.

The sums are kept on each member in ``<state>/model-sums/``, keyed by the folder's path and its
listing (names, sizes, modification times): the first launch reads every byte (about a minute
for 50 GB on a local NVMe), later ones only list the folder, and any change to a file's size or
time reads it again. The script runs over SSH; parsing and comparison are pure.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dflashops.deployment.layout import Layout
from dflashops.launch.report import LaunchRefused
from dflashops.progress import Say
from dflashops.remote import SshConnection

SUMS_DEADLINE_S = 3600.0  # the first read of a large model on a slow disk


def sums_folder(layout: Layout) -> str:
    return posixpath.join(layout.state, "model-sums")


def sums_script(path: str, layout: Layout, *, keep: bool = True) -> str:
    """Print ``sha256  ./relative/name`` for every file under ``path`` (links followed), from the
    member's cache when the folder's listing has not changed. ``keep=False`` (a dry run) reads
    the cache but writes nothing on the member."""
    q, folder = shlex.quote, shlex.quote(sums_folder(layout))
    listing = "find -L . -type f -printf '%P %s %T@\\n' | LC_ALL=C sort"
    digest = "find -L . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum"
    compute = (
        f'mkdir -p {folder} && {digest} > "$f.tmp" && mv "$f.tmp" "$f" && cat "$f"'
        if keep
        else digest
    )
    return "\n".join(
        [
            f"cd {q(path)} || exit 3",
            f"key=$( (echo {q(path)}; {listing}) | sha256sum | cut -c1-64)",
            f'f={folder}/"$key"',
            f'if [ -s "$f" ]; then cat "$f"; else {compute}; fi',
        ]
    )


def parse_sums(output: str) -> dict[str, str]:
    """``sha256sum`` lines -> {relative name: sha256}."""
    sums = {}
    for line in output.splitlines():
        digest, _, name = line.partition("  ")
        if len(digest) == 64 and name:
            sums[name.removeprefix("./")] = digest
    return sums


@dataclass(frozen=True)
class CopyMismatch:
    """How ``member``'s copy of ``path`` differs from the head's."""

    member: str
    path: str
    missing: tuple[str, ...] = ()  # on the head, not on the member
    extra: tuple[str, ...] = ()  # on the member, not on the head
    differ: tuple[str, ...] = ()

    def line(self, head: str) -> str:
        parts = []
        for what, names in (
            (f"missing on {self.member}", self.missing),
            (f"only on {self.member}", self.extra),
            ("different content", self.differ),
        ):
            if names:
                shown = ", ".join(names[:3]) + (
                    f" and {len(names) - 3} more" if len(names) > 3 else ""
                )
                parts.append(f"{what}: {shown}")
        return f"{self.path} on {self.member} is not {head}'s copy ({'; '.join(parts)})"


def compare_copies(path: str, head: str, sums: dict[str, dict[str, str]]) -> list[CopyMismatch]:
    """Every member's sums of ``path`` against the head's (``sums``: member -> name -> sha)."""
    base = sums[head]
    out = []
    for member, mine in sums.items():
        if member == head:
            continue
        missing = tuple(sorted(set(base) - set(mine)))
        extra = tuple(sorted(set(mine) - set(base)))
        differ = tuple(sorted(n for n in set(base) & set(mine) if base[n] != mine[n]))
        if missing or extra or differ:
            out.append(CopyMismatch(member, path, missing, extra, differ))
    return out


@dataclass(frozen=True)
class CopiesVerdict:
    """The members' copies compared: the report's line, and one warning per forced mismatch."""

    line: str
    warnings: tuple[str, ...] = ()


def compare_members(
    conns: Mapping[str, SshConnection],
    members: Sequence[str],
    paths: Sequence[str],
    layout: Layout,
    *,
    force: bool,
    keep: bool,
    say: Say,
) -> CopiesVerdict:
    """Every member's sums of each of ``paths`` against the head's (``members[0]``); a member
    with another copy is refused (:class:`LaunchRefused`) unless ``force``. ``keep``: cache the
    sums on the members (not on a dry run, which writes nothing)."""
    head = members[0]
    mismatches = []
    for path in paths:
        sums = {}
        for name in members:
            say(f"{name}: checksums of {path} (read once, then cached)")
            out = conns[name].run(
                sums_script(path, layout, keep=keep),
                deadline=SUMS_DEADLINE_S,
                display=f"checksums of {path}",
            )
            sums[name] = parse_sums(out.stdout)
        mismatches += compare_copies(path, head, sums)
    if not mismatches:
        return CopiesVerdict(f"same files on all {len(members)} members: {', '.join(paths)}")
    lines = [m.line(head) for m in mismatches]
    if not force:
        raise LaunchRefused(
            lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""),
            hint="give every member the same files (one shared mount, or copy the head's "
            "folder: rsync -a --checksum), or --force to launch anyway",
        )
    return CopiesVerdict(
        f"{len(lines)} folder(s) differ between members (--force)",
        tuple(f"{line} (--force)" for line in lines),
    )
