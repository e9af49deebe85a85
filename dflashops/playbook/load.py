"""Load a playbook file, apply ``--set`` overrides, validate once."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from dflashops.errors import PlaybookError
from dflashops.overrides import Override, apply_overrides, parse_overrides
from dflashops.playbook.models import Playbook
from dflashops.pydantic_errors import dotted, first_error
from dflashops.yamldoc import load_yaml_file, validate_doc


def playbook_dirs() -> list[Path]:
    """Where ``NAME`` is looked up: ``./playbooks``, then the playbooks shipped with dflashops
    (inside the wheel as ``dflashops/playbooks``; the repository's ``playbooks/`` when editable).
    """
    package = Path(__file__).resolve().parents[1]
    return [Path("playbooks"), package / "playbooks", package.parent / "playbooks"]


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name no file can have (too long: ENAMETOOLONG)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve_playbook_path(name_or_path: str | Path) -> Path:
    """A file path as given, or ``NAME`` looked up as ``NAME.yaml`` in :func:`playbook_dirs`."""
    path = Path(name_or_path)
    if _is_file(path):
        return path
    for folder in playbook_dirs():
        for candidate in (folder / f"{name_or_path}.yaml", folder / f"{name_or_path}.yml"):
            if _is_file(candidate):
                return candidate
    raise PlaybookError(
        "no such playbook file or name in playbooks/", source=str(name_or_path) or "''"
    )


def load_playbook(path: Path, overrides: Iterable[str | Override] = ()) -> Playbook:
    """Read and validate ``path``; ``--set`` values are applied before validation.

    An error in the file names ``file:line:key``; an error caused by an override names
    ``--set:key``, so the user knows which of the two to fix.
    """
    doc = load_yaml_file(path, PlaybookError)
    if not isinstance(doc.data, dict):
        raise PlaybookError("the playbook must be a mapping", source=doc.source, line=1)
    items = [o for o in overrides if isinstance(o, Override)]
    items += parse_overrides((o for o in overrides if isinstance(o, str)), PlaybookError)
    if not items:
        return validate_doc(Playbook, doc.data, doc, PlaybookError)
    validate_doc(Playbook, doc.data, doc, PlaybookError)  # the file alone must be valid
    data = apply_overrides(doc.data, items)
    try:
        return Playbook.model_validate(data)
    except ValidationError as exc:
        loc, reason = first_error(exc, data)
        key = dotted(loc)
        blamed = next((o for o in items if key.startswith(o.key) or o.key.startswith(key)), None)
        if blamed is None and items:
            blamed = items[-1]
        raise PlaybookError(reason, source="--set", key=blamed.key if blamed else key) from None
