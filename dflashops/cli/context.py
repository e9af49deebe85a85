"""What every command receives from the top-level group: flags and lazily loaded inputs."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory

DEFAULT_INVENTORY = "inventory.yaml"


@dataclass
class AppContext:
    """Global options. Commands ask it for the inventory instead of reading files themselves."""

    debug: bool = False
    inventory_path: Path | None = None
    skip_pve_check: bool = False  # a command's --skip-pve-check (cli.options)

    def resolve_inventory_path(self) -> Path:
        """``-i`` / ``DFLASHOPS_INVENTORY``, else ``./inventory.yaml``.

        Never the lab's inventory: an operator's command must not reach the lab by accident;
        ``lab up`` prints how to point at it."""
        from dflashops.errors import InventoryError

        if self.inventory_path is not None:
            return self.inventory_path
        default = Path(DEFAULT_INVENTORY)
        if default.is_file():
            return default
        raise InventoryError(
            "no such file, and neither -i nor DFLASHOPS_INVENTORY names another",
            source=f"./{DEFAULT_INVENTORY}",
            hint="pass -i FILE or set DFLASHOPS_INVENTORY=FILE; start from inventory/example.yaml",
        )

    def inventory(self, overrides: Iterable[str] = ()) -> Inventory:
        from dflashops.inventory.load import load_inventory

        inventory = load_inventory(self.resolve_inventory_path(), overrides)
        return inventory.without_pve_check() if self.skip_pve_check else inventory


def dump_json(data: Any) -> str:
    """The one JSON document a ``--json`` command prints on stdout.

    Strict JSON: a non-finite float (a rate of ``inf``, a ``nan`` mean) becomes ``null``, never
    the bare ``Infinity``/``NaN`` that Python writes and other parsers reject.
    """
    return json.dumps(_finite(data), indent=2, sort_keys=False, default=_plain, allow_nan=False)


def _plain(value: Any) -> Any:
    """What ``json`` cannot serialise itself: numbers stay numbers (finite), the rest text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def _finite(data: Any) -> Any:
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: _finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(value) for value in data]
    return data


def describe_unexpected(exc: BaseException) -> tuple[str, int]:
    """One line for an exception that is not a ``DflashopsError``, and its exit code.

    Names what failed where the exception knows it (the file of an ``OSError``); bad input
    (a ``ValueError``: undecodable text, a number out of range, nesting too deep) is exit 2.
    """
    from dflashops.errors import shorten

    if isinstance(exc, OSError):
        reason = exc.strerror or str(exc) or type(exc).__name__
        if exc.filename is None:
            return shorten(reason), 1
        # the reason must survive a long file name (ENAMETOOLONG): cut the name, not the reason
        return f"{shorten(str(exc.filename), 120)}: {shorten(reason, 120)}", 1
    if isinstance(exc, UnicodeDecodeError):
        return shorten(f"input is not {exc.encoding} text (byte {exc.start})"), 2
    text = str(exc) or type(exc).__name__
    if isinstance(exc, ValueError | RecursionError):
        return shorten(f"invalid input: {text}"), 2
    return shorten(f"{type(exc).__name__}: {text}"), 1
