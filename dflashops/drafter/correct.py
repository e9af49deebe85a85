"""``corrected_config``: the drafter config with the reference's certain values written in.

The building block of ``drafter push``. It patches only keys the reference is certain of, at the
place engines read them, and never removes or replaces anything the reference does not know.
Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dflashops.drafter.formats import SPECULATORS, config_format, speculators_place
from dflashops.drafter.keys import MISSING, get_path, json_equal, set_path, show
from dflashops.drafter.registry import RegistryEntry


@dataclass(frozen=True)
class Change:
    """One key written by a correction (``old`` is ``None`` when ``existed`` is false)."""

    key: str
    old: Any
    new: Any
    existed: bool

    def line(self) -> str:
        before = show(self.old) if self.existed else "(missing)"
        return f"{self.key}: {before} -> {show(self.new)}"


def corrected_config(
    current: Mapping[str, Any], ref: RegistryEntry
) -> tuple[dict[str, Any], list[Change]]:
    """``current`` with every certain value of ``ref`` applied, and the list of changes.

    A key engines read in several places (``block_size`` / ``dflash_config.block_size``) is
    patched wherever it is present, else written at its own path. A config in the speculators
    layout is patched where that layout holds each key (``aux_hidden_state_layer_ids`` as the
    target layer ids + 1, the layer config nested), and keys it has no place for are left out.
    Objects on the way are copied, so ``current`` is never modified; untouched sub-objects are
    shared with it. A non-object in the way (``dflash_config: "x"``) raises ``DrafterError``
    rather than being replaced."""
    new = dict(current)
    changes: list[Change] = []
    speculators = config_format(current) == SPECULATORS
    for rv in ref.keys:
        if not rv.certain:
            continue
        if speculators:
            place = speculators_place(rv.path, rv.value)
            writes = [place] if place is not None else []
        else:
            present = [p for p in rv.read_from if get_path(new, p) is not MISSING]
            writes = [(path, rv.value) for path in present or [rv.path]]
        for path, value in writes:
            old = get_path(new, path)
            if old is not MISSING and json_equal(old, value):
                continue
            set_path(new, path, value)
            existed = old is not MISSING
            changes.append(Change(path, old if existed else None, value, existed))
    return new, changes
