"""``dflashops inventory``: show and check the merged inventory."""

from __future__ import annotations

import click

from dflashops.cli.context import AppContext, dump_json

pass_app = click.make_pass_decorator(AppContext)


@click.group()
def inventory() -> None:
    """Inspect the inventory (clusters, nodes, containers)."""


@inventory.command("show")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="CT.KEY=VALUE",
    help="Override a container field, e.g. --set lab-ct1.cores=4 (repeatable).",
)
@pass_app
def show(app: AppContext, as_json: bool, overrides: tuple[str, ...]) -> None:
    """Print the merged inventory (defaults < group < container < --set), secrets redacted."""
    from dflashops.report.inventory_view import inventory_tables

    inv = app.inventory(overrides)
    if as_json:
        click.echo(dump_json(inv.redacted()))
        return
    from dflashops.cli.console import make_console

    console = make_console()
    for table in inventory_tables(inv):
        console.print(table)


@inventory.command("check")
@pass_app
def check(app: AppContext) -> None:
    """Validate the inventory and resolve every secret (values are never printed)."""
    inv = app.inventory()
    inv.check_secrets()
    click.echo(
        f"{inv.path}: ok ({len(inv.clusters)} cluster(s), {len(inv.containers)} container(s))"
    )
