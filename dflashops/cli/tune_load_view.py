"""``tune NAME --load``: run it, then show (or print as JSON) the levels, the decision, the
verification's verdict and the playbook change."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dflashops.cli.context import dump_json

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.tune.live_load import LiveLoadReport
    from dflashops.tune.request import LiveTuneRequest


def run_load(
    inventory: Inventory, request: LiveTuneRequest, destination: Path, *, as_json: bool
) -> None:
    from dflashops.cli.progress import spinner
    from dflashops.tune.live_load import live_load_tune

    with spinner(f"tune {request.container} --load", enabled=not as_json) as say:
        result = live_load_tune(inventory, request, say=say)
    saved = result.report.save(destination)
    if as_json:
        click.echo(dump_json(load_json(result, saved, not request.write_playbook)))
        return
    show_load(result, saved, not request.write_playbook)


def load_json(result: LiveLoadReport, saved: Path, dry_run: bool) -> dict[str, Any]:
    outcome = result.outcome
    return {
        "container": result.report.config.container,
        "mode": "load",
        "k_by_level": {str(level): k for level, k in outcome.result.k_by_level.items()},
        "stops_paying_at": outcome.result.stops_paying_at,
        "decision": outcome.decision.kind,
        "kept_k": outcome.kept_k,
        "kept_schedule": outcome.kept_schedule,
        "verdict": outcome.verdict.model_dump(mode="json") if outcome.verdict else None,
        "sentence": outcome.sentence,
        "launches": outcome.launches,
        "playbook": str(result.playbook_path),
        "written": not dry_run,
        "report": str(saved),
        "bench_files": [str(file) for file in result.bench_files],
        "warnings": list(outcome.result.warnings),
    }


def show_load(result: LiveLoadReport, saved: Path, dry_run: bool) -> None:
    from rich.table import Table

    from dflashops.cli.console import make_console

    console = make_console()
    outcome = result.outcome
    table = Table(title="k per concurrency level (tune --load)")
    for column in ("level", "k*", "predicted tok/s", "schedule tok/s", "best static tok/s"):
        table.add_column(column, justify="right")
    checked = {v.level: v for v in outcome.verdict.levels} if outcome.verdict else {}
    for level, k in outcome.result.k_by_level.items():
        choice = next(c for c in outcome.result.levels if c.level == level)
        row = choice.prediction(k)
        verdict = checked.get(level)
        table.add_row(
            str(level),
            str(k),
            f"{row.tok_s:.1f}" if row is not None else "-",
            f"{verdict.schedule_tok_s:.1f}" if verdict else "-",
            f"{verdict.best_static_tok_s:.1f} (k={verdict.best_static_k})" if verdict else "-",
        )
    console.print(table)
    for warning in outcome.result.warnings:
        console.print(f"warning: {warning}", highlight=False)
    console.print(outcome.sentence, highlight=False)
    verb = "would write" if dry_run else "wrote"
    schedule = outcome.kept_schedule
    kept = f"k={outcome.kept_k}" + (f", speculative_schedule {schedule}" if schedule else "")
    console.print(f"{result.playbook_path}: {verb} {kept}", highlight=False)
    console.print(f"saved {saved} (launches: {', '.join(map(str, outcome.launches))})")
