"""The (playbook, container) pairs of one ``up`` run: each playbook on the container it names,
or on each ``-c`` container instead; each pair once, in the order given."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dflashops.errors import PlaybookError
from dflashops.inventory.load import Inventory
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from dflashops.up.record import pair_id
from dflashops.up.request import UpRequest


@dataclass(frozen=True)
class Pair:
    id: str
    playbook: Playbook
    path: Path
    container: str
    cluster: str
    node: str


def resolve_pairs(inventory: Inventory, request: UpRequest) -> list[Pair]:
    """Every (playbook, container) pair, in the order given, each once."""
    pairs: dict[str, Pair] = {}
    for path in request.playbooks:
        book = load_playbook(path)
        names = request.containers or ((book.container,) if book.container else ())
        if not names:
            raise PlaybookError(
                "the playbook names no container", source=str(path), hint="pass -c CONTAINER"
            )
        for name in names:
            ct = inventory.container(name)
            pid = pair_id(ct.cluster, name, book.name)
            pairs.setdefault(pid, Pair(pid, book, path, name, ct.cluster, ct.node))
    return list(pairs.values())
