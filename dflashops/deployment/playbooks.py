"""The playbook that belongs to a container: ``-p`` when given, else the one playbook whose
``container:`` names it."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from dflashops.errors import PlaybookError
from dflashops.overrides import Override
from dflashops.playbook.load import load_playbook, playbook_dirs, resolve_playbook_path
from dflashops.playbook.models import Playbook


def playbooks_naming(container: str, folders: Iterable[Path] | None = None) -> list[Path]:
    """Every playbook in ``folders`` (default :func:`playbook_dirs`) whose ``container:`` is
    ``container``; a name in ./playbooks hides the same name shipped with dflashops."""
    found: list[Path] = []
    seen: set[str] = set()
    for folder in playbook_dirs() if folders is None else folders:
        for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            if path.stem in seen:
                continue
            seen.add(path.stem)
            try:
                doc = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                continue  # not ours to judge here: `playbook show FILE` names what is wrong
            if isinstance(doc, dict) and doc.get("container") == container:
                found.append(path)
    return found


def playbook_for_container(
    container: str, given: str | Path | None = None, *, folders: Iterable[Path] | None = None
) -> Path:
    """``given`` (``-p``) resolved, else the one playbook naming ``container``; none or several
    is an error that says so."""
    if given is not None:
        return resolve_playbook_path(given)
    found = playbooks_naming(container, folders)
    if len(found) == 1:
        return found[0]
    what = "no playbook" if not found else f"{len(found)} playbooks ({', '.join(map(str, found))})"
    raise PlaybookError(
        f"{what} in playbooks/ name container {container}",
        source="-p",
        hint="pass -p PLAYBOOK",
    )


def container_playbook(
    container: str, given: str | Path | None = None, overrides: Iterable[str | Override] = ()
) -> Playbook:
    """The container's playbook, loaded and validated with ``--set`` overrides applied."""
    return load_playbook(playbook_for_container(container, given), overrides)


def optional_container_playbook(
    container: str, given: str | Path | None = None, overrides: Iterable[str | Override] = ()
) -> Playbook | None:
    """As :func:`container_playbook`, but None when no ``-p`` was given and not exactly one
    playbook names the container (``bench NAME`` then describes the server from its
    ``deployed.json`` alone)."""
    if given is None and len(playbooks_naming(container)) != 1:
        return None
    return container_playbook(container, given, overrides)
