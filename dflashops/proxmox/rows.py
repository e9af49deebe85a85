"""One line of a plan table (wanted vs actual, field by field) and its fixed-width text form.

Both the container plan (PVE) and the guest plan (inside the container) are shown as rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

RowStatus = Literal["create", "change", "remove", "unchanged", "differs", "refused", "absent"]


class Row(BaseModel):
    """One line of the plan table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str
    wanted: str
    actual: str = ""
    status: RowStatus
    via: str = ""
    note: str = ""


def row_lines(rows: Sequence[Row]) -> list[str]:
    """Rows as fixed-width text lines (fixtures compare against them; the CLI draws tables)."""
    header = ("field", "wanted", "actual", "status", "via")
    table = [(row.field, row.wanted, row.actual, row.status, row.via) for row in rows]
    widths = [max(len(cells[i]) for cells in [header, *table]) for i in range(len(header))]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row, cells in zip(rows, table, strict=True):
        text = "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        if row.note:
            text += f"  # {row.note}"
        lines.append("  " + text)
    return lines
