"""What ``up`` shows: a live line per pair while it runs, then one table (or each pair's plan)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

import click
from rich.table import Table

from dflashops.cli.cells import number
from dflashops.cli.console import make_console
from dflashops.cli.context import dump_json
from dflashops.cli.fleet_view import fleet_lines
from dflashops.cli.progress import Lanes, lanes
from dflashops.up.pairs import resolve_pairs
from dflashops.up.runner import RESULT

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.up.outcome import UpResult
    from dflashops.up.request import UpRequest
    from dflashops.up.runner import Event


@contextmanager
def pair_lines(*, enabled: bool = True) -> Iterator[Event]:
    """Yield ``on_event(pair, step, message)``: each pair is a lane of the progress display
    (its own live line on a terminal, step lines elsewhere)."""
    with lanes(enabled=enabled) as tell:
        yield pair_events(tell)


def up_lines(
    inventory: Inventory, request: UpRequest, *, enabled: bool = True
) -> AbstractContextManager[Event]:
    """A run's display (:func:`pair_lines`), or a dry run's (:func:`plan_lines`: the pairs in
    the order given, each one line once planned)."""
    if not request.dry_run:
        return pair_lines(enabled=enabled)
    return plan_lines([pair.id for pair in resolve_pairs(inventory, request)], enabled=enabled)


@contextmanager
def plan_lines(pairs: Sequence[str], *, enabled: bool = True) -> Iterator[Event]:
    """A dry run's display (:mod:`dflashops.cli.fleet_view`): a live line per pair on a
    terminal, each pair's plan in one line once planned elsewhere, in the order given."""
    with fleet_lines("planning", pairs, enabled=enabled) as tell:

        def on_event(pair: str, step: str, message: str) -> None:
            if step == RESULT:  # the pair's result line names the pair itself
                tell.done(pair, message)
            else:
                tell(pair, f"[{step}] {message}" if step else message)

        yield on_event


def pair_events(tell: Lanes) -> Event:
    """``up``'s events as lanes: a pair's failure and its result line are the lane's last word
    (said once, not a step that "still runs")."""

    def on_event(pair: str, step: str, message: str) -> None:
        if step == RESULT:  # the pair's result line names the pair itself
            tell.done(pair, message)
        elif message.startswith("failed: "):
            tell.done(pair, f"{pair} [{step}] {message}")
        else:
            tell(pair, f"{pair} [{step}] {message}" if step else f"{pair}: {message}")

    return on_event


def render_result(result: UpResult, *, as_json: bool) -> None:
    """The end of a run: warnings on stderr, then one JSON document, each pair's plan (a dry
    run) or the end table."""
    render_warnings(result)
    if as_json:
        click.echo(dump_json(result.to_json()))
    elif result.dry_run:
        render_plan(result)
    else:
        render_table(result)


def render_warnings(result: UpResult) -> None:
    """Each pair's warnings on stderr (a dead run's lock taken over, a record set aside)."""
    console = make_console(stderr=True)
    for pair in result.pairs:
        for warning in pair.warnings:
            console.print(f"warning: {warning}", soft_wrap=True)


def render_plan(result: UpResult) -> None:
    """Each pair's plan: which steps would run, and why (or why it cannot be planned)."""
    console = make_console()
    for pair in result.pairs:
        if pair.outcome == "failed":  # its record cannot be read: the other pairs still are
            console.print(pair.line(), soft_wrap=True)
            continue
        table = Table(title=f"{pair.pair}: plan (dry run, nothing changed)")
        for column in ("step", "action", "why"):
            table.add_column(column)
        for planned in pair.plan:
            table.add_row(planned.step, planned.action, planned.reason)
        console.print(table)
        for note in pair.notes:
            console.print(f"note: {note}")


def render_table(result: UpResult) -> None:
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
            number(numbers.get("output_throughput"), 1),
            number(numbers.get("spec_decode_acceptance_length"), 2),
            "-" if numbers.get("k") is None else str(numbers["k"]),
        )
    console.print(table)
    if result.interrupted:
        console.print("interrupted: run the same `dflashops up` again to continue")
    console.print(f"run folders: {result.state_dir}")
