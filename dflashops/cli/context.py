"""What every command receives from the top-level group: flags and lazily loaded inputs."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory


@dataclass
class AppContext:
    """Global options. Commands ask it for the inventory instead of reading files themselves."""

    debug: bool = False
    inventory_path: Path | None = None

    def resolve_inventory_path(self) -> Path:
        """``-i`` / ``DFLASHOPS_INVENTORY``, else ``./inventory.yaml``, else the lab's."""
        from dflashops.errors import InventoryError

        if self.inventory_path is not None:
            return self.inventory_path
        for candidate in (Path("inventory.yaml"), lab_inventory_path()):
            if candidate.is_file():
                return candidate
        raise InventoryError(
            "no inventory given",
            hint="pass -i FILE, set DFLASHOPS_INVENTORY, or run `dflashops lab up`",
        )

    def inventory(self, overrides: Iterable[str] = ()) -> Inventory:
        from dflashops.inventory.load import load_inventory

        return load_inventory(self.resolve_inventory_path(), overrides)


def lab_inventory_path() -> Path:
    """Where ``lab up`` writes its inventory."""
    from dflashops.lab.paths import lab_paths

    return lab_paths().inventory


def dump_json(data: Any) -> str:
    """The one JSON document a ``--json`` command prints on stdout."""
    return json.dumps(data, indent=2, sort_keys=False, default=str)
