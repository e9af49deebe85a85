"""How a table cell shows a measured value that may be missing."""

from __future__ import annotations

from collections.abc import Iterable
from typing import SupportsFloat


def number(value: SupportsFloat | None, digits: int = 2) -> str:
    """``value`` with ``digits`` decimals, or ``-`` when it was not measured."""
    return "-" if value is None else f"{float(value):.{digits}f}"


def numbers(values: Iterable[SupportsFloat] | None, digits: int = 2) -> str:
    """Several values on one line (per-position rates), or ``-`` when there are none."""
    shown = [number(value, digits) for value in values or ()]
    return " ".join(shown) or "-"
