"""``dflashops drafter``: check a DFlash drafter config, compare it with a reference, push a
corrected one, and train a new one (``drafter train``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from dflashops.cli.context import dump_json
from dflashops.cli.options import SafePath, playbook_option, skip_pve_check_option, wait_options

_REGISTRY = click.option(
    "--registry",
    "registry_paths",
    multiple=True,
    type=SafePath(exists=True, path_type=Path),
    help="Extra reference entry file or folder of entries (repeatable).",
)
_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
# the methods a playbook names (drafter.method) that a drafter check has rules for; spelled here
# so --help does not import the validation core
_METHODS = ("dflash", "dspark", "eagle3", "eagle", "mtp", "draft_model", "ngram", "suffix")
_FAMILIES = (
    "dflash",
    "dflash2",
    "dspark",
    "eagle3",
    "eagle",
    "mtp",
    "draft_model",
    "ngram",
    "suffix",
)


def _engine(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    """``vllm==X`` / ``sglang==X`` -> ``EngineSpec``; a bad one is a usage error (exit 2)."""
    if value is None:
        return None
    from dflashops.drafter.engine import parse_engine
    from dflashops.errors import DrafterError

    try:
        return parse_engine(value)
    except DrafterError as exc:
        raise click.BadParameter(exc.one_line(), ctx=ctx, param=param) from exc


@click.group()
def drafter() -> None:
    """Validate DFlash drafter configs offline (exit 0 clean, 3 warnings, 4 errors), correct
    them in a container, and train new drafters."""


@drafter.command("check")
@click.argument("drafter_location", metavar="DRAFTER")
@click.option("--target", "target_location", metavar="T", help="Target model dir or NAME:PATH.")
@click.option("--ref", metavar="REF", help="Reference entry name or file (default: matched).")
@click.option(
    "--engine",
    metavar="ENGINE==VERSION",
    callback=_engine,
    help="Engine to run on: vllm==0.26.0 or sglang==0.5.11.",
)
@click.option(
    "--k",
    "--num-speculative-tokens",
    "k",
    type=click.IntRange(min=1),
    help="num_speculative_tokens the server will use (checked against block_size - 1).",
)
@click.option(
    "--method",
    type=click.Choice(_METHODS),
    help="The method the server will use (the playbook's drafter.method): its family's rules "
    "apply. Default: the family the drafter's config says (DFlash when it says none).",
)
@_REGISTRY
@_JSON
@click.pass_context
def check(
    ctx: click.Context,
    *,
    drafter_location: str,
    target_location: str | None,
    ref: str | None,
    engine: Any,
    k: int | None,
    method: str | None,
    registry_paths: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Check DRAFTER (a dir or NAME:PATH): config, tokenizer ids and safetensors header against
    the target, a reference drafter and the engine version, by the rules of its family
    (DFlash, DFlash2, DSpark, EAGLE-3, EAGLE, a draft model, MTP)."""
    from dflashops.drafter.check import check_paths
    from dflashops.drafter.report import DrafterCheckReport

    run = check_paths(
        drafter_location,
        target=target_location,
        ref=ref,
        engine=engine,
        k=k,
        registry_paths=registry_paths,
        method=method,
    )
    report = DrafterCheckReport.from_run(run)
    if as_json:
        click.echo(dump_json(report.model_dump(mode="json")))
    else:
        from dflashops.cli.console import make_console
        from dflashops.drafter.view import check_view

        make_console().print(check_view(report))
    ctx.exit(report.exit_code)


@drafter.command("diff")
@click.argument("drafter_location", metavar="DRAFTER")
@click.option(
    "--against",
    required=True,
    metavar="REF|FILE",
    help="Reference entry name, entry file, or another config (file or dir).",
)
@_REGISTRY
@_JSON
def diff(
    *, drafter_location: str, against: str, registry_paths: tuple[Path, ...], as_json: bool
) -> None:
    """Show DRAFTER's config key by key (dotted) where it differs from REF or FILE."""
    from dflashops.drafter.check import diff_paths
    from dflashops.drafter.report import DrafterDiffReport

    report = DrafterDiffReport.from_run(diff_paths(drafter_location, against, registry_paths))
    if as_json:
        click.echo(dump_json(report.model_dump(mode="json")))
        return
    from dflashops.cli.console import make_console
    from dflashops.drafter.view import diff_view

    make_console().print(diff_view(report))


@drafter.command("push")
@click.argument("name")
@playbook_option
@click.option(
    "--from",
    "source",
    metavar="REF|FILE",
    help="Reference entry name or entry file (default: the playbook's drafter.ref, else matched).",
)
@click.option("--dry-run", is_flag=True, help="Show the keys that would change; write nothing.")
@_REGISTRY
@_JSON
@wait_options
@skip_pve_check_option
@click.pass_obj
def push(
    app: Any,
    name: str,
    *,
    playbook_name: str | None,
    source: str | None,
    dry_run: bool,
    registry_paths: tuple[Path, ...],
    as_json: bool,
    wait_s: float | None,
) -> None:
    """Correct the drafter config.json in container NAME from a reference.

    Only keys the reference is certain of are written (see `drafter refs`); keys it does not
    know are never removed or replaced. The file is replaced atomically after a sha256 check,
    the old one kept as config.json.<UTC time>.bak, then re-read and re-checked. A running
    server keeps the config it started with: the output says when a relaunch is needed.
    """
    from dflashops.cli.progress import spinner
    from dflashops.deployment.playbooks import container_playbook
    from dflashops.drafter.push import push_drafter_config

    inventory = app.inventory()
    book = container_playbook(name, playbook_name)
    with spinner("drafter push", enabled=not as_json) as say:
        result = push_drafter_config(
            inventory,
            name,
            book,
            source=source,
            dry_run=dry_run,
            progress=say,
            registry_paths=registry_paths,
            wait_s=wait_s,
        )
    if as_json:
        click.echo(dump_json(result.to_json()))
        return
    verb = "would change" if dry_run else "changed"
    click.echo(f"{result.path} against {result.reference}: {len(result.changes)} key(s) {verb}")
    for change in result.changes:
        click.echo(f"  {change.line()}")
    if result.pushed:
        click.echo(f"pushed (sha256 {result.sha256}); previous file kept as {result.backup}")
    for finding in result.findings:
        click.echo(f"  re-check: {finding}")
    if result.server_note:
        click.echo(result.server_note)


@drafter.command("refs")
@_REGISTRY
@click.option("--family", type=click.Choice(_FAMILIES), help="Only this family's entries.")
@_JSON
def refs(*, registry_paths: tuple[Path, ...], family: str | None, as_json: bool) -> None:
    """List the reference drafters (of one family with --family) and which of their values are
    certain."""
    from dflashops.drafter.registry import load_registry

    registry = load_registry(registry_paths)
    rows: list[dict[str, Any]] = [
        {
            "name": e.name,
            "family": e.family,
            "target": e.target.name,
            "certain": [k.path for k in e.keys if k.certain],
            "not_certain": [k.path for k in e.keys if not k.certain],
            "provenance": e.provenance,
            "file": e.file,
        }
        for e in registry.entries
        if family is None or e.family == family
    ]
    if as_json:
        click.echo(dump_json(rows))
        return
    from rich.table import Table

    from dflashops.cli.console import make_console

    table = Table(title="Reference drafters", show_lines=True)
    for column in ("name", "family", "target", "certain keys", "not certain"):
        table.add_column(column)  # one key per line; the console keeps each one whole
    for row in rows:
        table.add_row(
            row["name"],
            row["family"],
            row["target"],
            "\n".join(row["certain"]),
            "\n".join(row["not_certain"]),
        )
    make_console().print(table)


@drafter.command(
    "train",
    short_help="Train a DFlash drafter in a container: data, train, export, check.",
    epilog="""\b
Stages (each resumable; `stages/<stage>.json` in the run folder marks it done):
  data     the playbook's dataset answered again by the served target
           (temperature and thinking mode as train.data says); the server
           must be up: a stopped one is started
  prepare  tokens and the target's hidden states (the server is stopped
           first, saying so: training needs its GPUs)
  train    vLLM's speculators library trains the drafter (checkpoints;
           a rerun resumes from the last one)
  export   config.json + model.safetensors, then `drafter check` against
           the target (errors stop here, exit 4)
Afterwards the previous server is restarted, unless --promote launches a new
playbook (<playbook>.trained.yaml beside the given one, or in ./playbooks for
a bundled one; the given playbook is never rewritten). --evaluate launches the
new drafter, benches it next to the one it replaces, then restores.

\b
The run folder is /var/lib/dflashops/training/<train.name> in the container;
provenance.json, metrics.jsonl, training_loss.png and train-report.json go to
--out (default ./drafter-train-NAME-RUN). A failure names the stage, its
command and its log tail; what was done is kept. Exit codes: 0 ok, 1 failed,
2 bad playbook or dataset (file:line), 4 the export fails drafter check.

\b
Examples:
  dflashops drafter train lab-ct1 --dry-run
  dflashops drafter train lab-ct1
  dflashops drafter train gpu-ct2 -p qwen3-8b-dflash --evaluate --promote
""",
)
@click.argument("name")
@playbook_option
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the plan (stages, sizes, where files go, estimated time); change nothing.",
)
@click.option("--evaluate", is_flag=True, help="Bench the new drafter against the current one.")
@click.option(
    "--promote", is_flag=True, help="Write a playbook serving the new drafter; launch it."
)
@click.option(
    "--out",
    type=SafePath(file_okay=False, path_type=Path),
    help="Local folder for provenance, loss curve and report (default ./drafter-train-NAME-RUN).",
)
@_JSON
@wait_options
@skip_pve_check_option
@click.pass_obj
def train(
    app: Any,
    name: str,
    *,
    playbook_name: str | None,
    dry_run: bool,
    evaluate: bool,
    promote: bool,
    out: Path | None,
    as_json: bool,
    wait_s: float | None,
) -> None:
    """Train a DFlash drafter for the target container NAME serves, as its playbook's train:
    section says (`playbook show` prints it): data from the served target, training with
    vLLM's speculators library, export, drafter check; resumable stage by stage."""
    from dflashops.cli.progress import spinner
    from dflashops.training.request import TrainRequest
    from dflashops.training.run import train_drafter

    request = TrainRequest(
        container=name,
        playbook=playbook_name,
        dry_run=dry_run,
        evaluate=evaluate,
        promote=promote,
        out=out,
        wait_s=wait_s,
    )
    with spinner(f"drafter train {name}", enabled=not as_json) as say:

        def tell(message: str) -> None:
            say(message)
            if not as_json and _milestone(message):
                click.echo(message, err=True)

        outcome = train_drafter(app.inventory(), request, say=tell)
    loss_curve = None if dry_run else _loss_curve(outcome)
    if as_json:
        data = outcome.to_json()
        data["loss_curve"] = str(loss_curve) if loss_curve else None
        click.echo(dump_json(data))
        return
    from dflashops.cli.console import make_console
    from dflashops.training.render import outcome_renderables, plan_renderables

    console = make_console()
    shown = (
        plan_renderables(outcome.plan, dry_run=True)
        if dry_run
        else outcome_renderables(outcome, loss_curve)
    )
    for renderable in shown:
        console.print(renderable)


def _milestone(message: str) -> bool:
    """Progress worth a line of its own on stderr (a stage starts, the server changes)."""
    words = message.split(" ", 2)
    return words[0] in {"stopping", "starting", "restarting", "launching", "promoted:"} or (
        len(words) > 1 and words[1] == "started"
    )


def _loss_curve(outcome: Any) -> Path | None:
    """The loss curve next to the local provenance, from the copied metrics.jsonl."""
    from dflashops.report.training_plots import write_loss_curve

    metrics = outcome.metrics_file
    if metrics is None:
        return None
    title = f"drafter train {outcome.plan.container}: run {outcome.plan.run}"
    path: Path = write_loss_curve(metrics, metrics.parent, title=title)
    return path
