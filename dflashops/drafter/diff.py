"""``drafter diff``: a config key by key (nested keys dotted) against a reference or a file.

Lists are compared whole (``layer_types`` reads better as one value). Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dflashops.drafter.keys import MISSING, first_present, flatten, json_equal, show
from dflashops.drafter.registry import RegistryEntry

DiffStatus = Literal["changed", "missing", "extra"]


@dataclass(frozen=True)
class DiffLine:
    """``changed``: both have the key; ``missing``: only the other side; ``extra``: only the
    drafter. Against a reference, ``certain`` and ``basis`` say how sure it is of its value."""

    key: str
    status: DiffStatus
    drafter: str
    other: str
    certain: bool | None = None
    basis: str | None = None


def diff_configs(drafter: Mapping[str, Any], other: Mapping[str, Any]) -> list[DiffLine]:
    """Every dotted key whose value differs between two configs, sorted by key."""
    left, right = flatten(drafter), flatten(other)
    lines: list[DiffLine] = []
    for key in sorted(left.keys() | right.keys()):
        a, b = left.get(key, MISSING), right.get(key, MISSING)
        if a is MISSING:
            lines.append(DiffLine(key, "missing", show(a), show(b)))
        elif b is MISSING:
            lines.append(DiffLine(key, "extra", show(a), show(b)))
        elif not json_equal(a, b):
            lines.append(DiffLine(key, "changed", show(a), show(b)))
    return lines


def diff_against_entry(drafter: Mapping[str, Any], entry: RegistryEntry) -> list[DiffLine]:
    """The keys ``entry`` knows whose value differs in the drafter, read where engines read them.

    Keys the reference does not know are not listed: it cannot say they are wrong."""
    lines: list[DiffLine] = []
    for rv in entry.keys:
        hit = first_present(drafter, rv.read_from)
        key, value = hit if hit is not None else (rv.path, MISSING)
        if value is not MISSING and json_equal(value, rv.value):
            continue
        status: DiffStatus = "missing" if value is MISSING else "changed"
        lines.append(DiffLine(key, status, show(value), show(rv.value), rv.certain, rv.basis))
    return lines
