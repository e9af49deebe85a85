"""What ``up`` shows: a live line per pair while it runs, then one table (or each pair's plan)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from rich.table import Table

from dflashops.cli.console import make_console


@contextmanager
def pair_lines(*, enabled: bool = True) -> Iterator[Callable[[str, str, str], None]]:
    """Yield ``on_event(pair, step, message)``: each pair gets its own live progress line."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = make_console(stderr=True)
    frames = "line" if console.options.ascii_only else "dots"
    lock = threading.Lock()
    tasks: dict[str, Any] = {}
    with Progress(
        SpinnerColumn(frames),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
        disable=not enabled,
    ) as progress:

        def on_event(pair: str, step: str, message: str) -> None:
            text = f"{pair} [{step}] {message}" if step else f"{pair}: {message}"
            with lock:
                if pair not in tasks:
                    tasks[pair] = progress.add_task(text)
                    return
            progress.update(tasks[pair], description=text)

        yield on_event


def render_plan(result: Any) -> None:
    """Each pair's plan: which steps would run, and why."""
    console = make_console()
    for pair in result.pairs:
        table = Table(title=f"{pair.pair}: plan (dry run, nothing changed)")
        for column in ("step", "action", "why"):
            table.add_column(column)
        for planned in pair.plan:
            table.add_row(planned.step, planned.action, planned.reason)
        console.print(table)
        for note in pair.notes:
            console.print(f"note: {note}")


def render_table(result: Any) -> None:
    """One line per pair, then the table: pair, last step, outcome, tok/s, acceptance, k."""
    console = make_console()
    for pair in result.pairs:
        console.print(pair.line(), soft_wrap=True)
    if all(pair.outcome == "unchanged" for pair in result.pairs):
        return
    table = Table(title="dflashops up")
    for column in ("pair", "last step", "outcome", "tok/s", "acceptance length", "k"):
        table.add_column(column, justify="right" if column in ("tok/s", "k") else "left")
    for pair in result.pairs:
        numbers = pair.numbers()
        table.add_row(
            pair.pair,
            pair.last_step or "-",
            pair.outcome,
            _number(numbers.get("output_throughput"), 1),
            _number(numbers.get("spec_decode_acceptance_length"), 2),
            "-" if numbers.get("k") is None else str(numbers["k"]),
        )
    console.print(table)
    if result.interrupted:
        console.print("interrupted: run the same `dflashops up` again to continue")
    console.print(f"run folders: {result.state_dir}")


def _number(value: Any, digits: int) -> str:
    return "-" if value is None else f"{float(value):.{digits}f}"
