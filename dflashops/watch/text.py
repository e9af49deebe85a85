"""A window in words: the cells of the live table and the one line a pipe gets per window.

A number the window cannot tell is "—" (the console writes "-" where the output is ASCII).
"""

from __future__ import annotations

from dataclasses import dataclass

from dflashops.watch.window import WatchWindow

MISSING = "—"
HEADERS = (
    "#",
    "time",
    "window",
    "out tok/s",
    "running",
    "waiting",
    "accept len",
    "per position",
    "drafts",
    "note",
)


@dataclass(frozen=True)
class WindowCells:
    number: str
    time: str
    seconds: str
    throughput: str
    running: str
    waiting: str
    acceptance_length: str
    per_position: str
    drafts: str
    note: str

    def row(self) -> tuple[str, ...]:
        """In the order of ``HEADERS``."""
        return (
            self.number,
            self.time,
            self.seconds,
            self.throughput,
            self.running,
            self.waiting,
            self.acceptance_length,
            self.per_position,
            self.drafts,
            self.note,
        )


def window_cells(window: WatchWindow) -> WindowCells:
    rates = window.spec_decode_per_position_acceptance_rates
    note = "; ".join(window.notes)
    if window.error is not None:
        note = f"{window.error}; trying again"
    return WindowCells(
        number=str(window.window),
        time=f"{window.time.astimezone():%H:%M:%S}",
        seconds=_number(window.duration, "{:.1f} s"),
        throughput=_number(window.output_throughput, "{:.1f}"),
        running=_number(window.num_requests_running, "{}"),
        waiting=_number(window.num_requests_waiting, "{}"),
        acceptance_length=_number(window.spec_decode_acceptance_length, "{:.2f}"),
        per_position=" ".join(f"{rate:.2f}" for rate in rates) if rates else MISSING,
        drafts=_number(window.spec_decode_num_drafts, "{}"),
        note=note,
    )


def window_line(window: WatchWindow) -> str:
    """One line for a pipe: ``#3 12:00:04 2.0 s: 100.0 tok/s out, running 4, …``."""
    cells = window_cells(window)
    head = f"#{cells.number} {cells.time}"
    if window.error is not None:
        return f"{head}: {cells.note}"
    line = (
        f"{head} {cells.seconds}: {cells.throughput} tok/s out, running {cells.running}, "
        f"waiting {cells.waiting}, accept len {cells.acceptance_length}, per position "
        f"{cells.per_position}, drafts {cells.drafts}"
    )
    return f"{line} ({cells.note})" if cells.note else line


def _number(value: float | None, spec: str) -> str:
    return MISSING if value is None else spec.format(value)
