"""``dflashops playbook``: validate and show a playbook with overrides applied."""

from __future__ import annotations

import click

from dflashops.cli.context import dump_json


@click.group()
def playbook() -> None:
    """Inspect playbooks (model, drafter, engine, server args, bench, tune, train)."""


@playbook.command("show")
@click.argument("name_or_path")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a dotted key, e.g. --set server.num_speculative_tokens=6 (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def show(name_or_path: str, overrides: tuple[str, ...], as_json: bool) -> None:
    """Validate NAME_OR_PATH (a file, or NAME for playbooks/NAME.yaml) and print it."""
    from dflashops.playbook.load import load_playbook, resolve_playbook_path

    book = load_playbook(resolve_playbook_path(name_or_path), overrides)
    data = book.model_dump(mode="json")
    if as_json:
        click.echo(dump_json(data))
        return
    import yaml

    click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
    if book.train is not None:
        # the train section's nulls are not gaps: say what fills them
        click.echo(
            f"# train: run name {book.train_run_name}; drafter keys left null come from the "
            "registry entry of drafter.ref, else the target's config and tokenizer "
            "(`dflashops drafter train NAME --dry-run` shows each value and its source)"
        )
