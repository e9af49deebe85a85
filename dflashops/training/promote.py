"""``--promote``: a new playbook that serves the trained drafter, written beside the given one.

The given playbook is never rewritten: the new one is ``<stem>.trained.yaml`` next to it, or in
``./playbooks`` when the given one ships with dflashops (a bundled playbook is never touched, and
``./playbooks`` is where ``-p NAME`` looks first). It is the given file with one line changed,
``drafter.model.path``, so its comments and layout survive; ``drafter.ref`` is kept when the
trained drafter agrees with that registry entry and commented out (naming the keys) when it does
not, and ``num_speculative_tokens`` is lowered to ``block_size - 1`` when the new drafter drafts
fewer tokens. A playbook without a DFlash drafter section is written out whole instead (its
comments cannot be kept; its first line says so). The result is validated before it is written.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from dflashops.errors import PlaybookError
from dflashops.playbook.load import load_playbook, playbook_dirs
from dflashops.playbook.models import Playbook
from dflashops.yamldoc import parse_yaml

SUFFIX = ".trained"
_VALUE_LINE = re.compile(
    r"^(?P<lead>\s*(?:-\s+)?[A-Za-z_]+:\s*)(?P<value>[^#\n]*?)(?P<tail>\s*(?:#.*)?)$"
)


@dataclass(frozen=True)
class Promotion:
    """What the new playbook changes."""

    drafter_dir: str
    block_size: int
    ref_conflicts: Sequence[str] = ()  # keys where the trained drafter disagrees with drafter.ref
    run: str = ""


def is_bundled(path: Path) -> bool:
    """Whether ``path`` is one of the playbooks shipped with dflashops."""
    shipped = [folder.resolve() for folder in playbook_dirs()[1:]]
    return path.resolve().parent in shipped


def promoted_path(given: Path) -> Path:
    folder = Path("playbooks") if is_bundled(given) else given.parent
    stem = given.stem.removesuffix(SUFFIX)
    return folder / f"{stem}{SUFFIX}.yaml"


def promoted_text(given: Path, book: Playbook, change: Promotion) -> str:
    """The new playbook's text (see the module doc)."""
    text = given.read_text(encoding="utf-8")
    doc = parse_yaml(text, str(given), PlaybookError)
    path_line = doc.lines.get(("drafter", "model", "path"))
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    header = (
        f"# Promoted by `dflashops drafter train` (run {change.run}, {stamp}) from {given}:\n"
        f"# drafter.model.path is the trained drafter; {given.name} itself is unchanged.\n"
    )
    k = book.server.num_speculative_tokens
    new_k = min(k, change.block_size - 1) if k else change.block_size - 1
    if book.drafter.method != "dflash" or path_line is None:
        return header + _whole(book, change, new_k)
    lines = text.splitlines(keepends=True)
    _set_value(lines, path_line, change.drafter_dir, "the trained drafter")
    ref_line = doc.lines.get(("drafter", "ref"))
    if ref_line is not None and change.ref_conflicts:
        old = lines[ref_line - 1]
        indent = old[: len(old) - len(old.lstrip())]
        keys = ", ".join(change.ref_conflicts)
        lines[ref_line - 1] = (
            f"{indent}# {old.strip()}  (off: the trained drafter differs: {keys})\n"
        )
    k_line = doc.lines.get(("server", "num_speculative_tokens"))
    if k_line is not None and k != new_k:
        _set_value(lines, k_line, str(new_k), "at most block_size - 1 of the trained drafter")
    return header + "".join(lines)


def _set_value(lines: list[str], number: int, value: str, note: str) -> None:
    line = lines[number - 1]
    match = _VALUE_LINE.match(line.rstrip("\n"))
    if match is None:
        raise PlaybookError("cannot edit this line", source="playbook", line=number)
    lines[number - 1] = f"{match['lead']}{value}  # {note}\n"


def _whole(book: Playbook, change: Promotion, k: int) -> str:
    data = book.model_dump(mode="json", exclude_none=True)
    data["drafter"] = {"method": "dflash", "model": {"path": change.drafter_dir}}
    data["server"]["num_speculative_tokens"] = k
    note = "# Written out whole: the given playbook had no DFlash drafter line to change.\n"
    return note + yaml.safe_dump(data, sort_keys=False)


def write_promoted(given: Path, book: Playbook, change: Promotion) -> tuple[Path, Playbook]:
    """Write the new playbook (validated first) and return its path and model."""
    destination = promoted_path(given)
    if destination.resolve() == given.resolve() and is_bundled(given):
        raise PlaybookError("refusing to rewrite a bundled playbook", source=str(given))
    text = promoted_text(given, book, change)
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    try:
        promoted = load_playbook(temporary)
    except PlaybookError:
        temporary.unlink(missing_ok=True)
        raise
    temporary.replace(destination)
    return destination, promoted
