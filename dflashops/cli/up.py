"""``dflashops up``: the whole loop for each (playbook, container) pair, resumable, in parallel."""

from __future__ import annotations

import click

from dflashops.cli.context import AppContext
from dflashops.cli.options import skip_pve_check_option
from dflashops.up.lock import DEFAULT_WAIT_S
from dflashops.up.plan import STEPS

pass_app = click.make_pass_decorator(AppContext)


@click.command()
@click.argument("playbooks", nargs=-1, required=True, metavar="PLAYBOOK...")
@click.option(
    "-c",
    "--container",
    "containers",
    multiple=True,
    metavar="CONTAINER",
    help="Run each playbook on this container instead of the one it names (repeatable: "
    "each container becomes a pair).",
)
@click.option("--dry-run", is_flag=True, help="Print each pair's plan and why; change nothing.")
@click.option(
    "--from",
    "from_step",
    type=click.Choice(STEPS),
    help="Redo from this step on, even where nothing changed.",
)
@click.option(
    "--parallel",
    type=click.IntRange(1, 64),
    default=None,
    metavar="N",
    help="Pairs at once. [default: the inventory's parallel (8 unless set) for provision "
    "steps and --dry-run; 2 past provision, where each loads a model and benches; N sets both]",
)
@click.option(
    "--fix-drafter",
    is_flag=True,
    help="Before the drafter check, push the registry's certain keys (as `drafter push`).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Go on when the drafter check finds errors (as `launch --force`).",
)
@click.option(
    "--wait",
    is_flag=True,
    help="When another `up` runs on a pair, or another dflashops command is changing its "
    "container, queue behind it (its progress says so) instead of failing that pair at once "
    "with 'busy: …'.",
)
@click.option(
    "--wait-timeout",
    "wait_timeout",
    type=click.IntRange(min=1),
    metavar="SECONDS",
    help="How long --wait waits for a busy pair before that pair fails (implies --wait). "
    f"[default: {DEFAULT_WAIT_S}]",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document: every pair.")
@skip_pve_check_option
@pass_app
@click.pass_context
def up(
    ctx: click.Context,
    app: AppContext,
    *,
    playbooks: tuple[str, ...],
    containers: tuple[str, ...],
    dry_run: bool,
    from_step: str | None,
    parallel: int | None,
    fix_drafter: bool,
    force: bool,
    wait: bool,
    wait_timeout: int | None,
    as_json: bool,
) -> None:
    """Run the whole loop for each PLAYBOOK on the container it names (or each -c):
    provision -> drafter -> launch -> smoke -> bench -> tune -> report.

    \b
    Steps (the names --from takes):
      provision  create or verify the container (as `provision NAME`)
      drafter    check the drafter as launch does; errors stop the pair
                 (--fix-drafter pushes certain keys first, --force goes on)
      launch     render, push, (re)start, wait for readiness (as `launch`)
      smoke      one chat request; spec-decode counters must move
      bench      the playbook's workload (as `bench NAME`)
      tune       when the playbook has a tune section (as `tune NAME`); the
                 playbook is not edited: the run folder gets a copy at k*
      report     plots, summary.md and record.json in the pair's run folder
    \b
    Resumable: each pair's record (state folder: $DFLASHOPS_UP_STATE, default
    ~/.local/state/dflashops/up) keeps every step's input digest; a rerun skips
    steps that succeeded with the same inputs (launch only while its server
    still serves), and a finished pair says "nothing to do". Ctrl-C stops each
    pair after the step in progress; the next `up` continues there.

    \b
    One run per pair at a time: another `up` on a busy pair fails it at once
    ("busy: up by pid N since T (on HOST)"), or queues behind it with --wait;
    a dead run's lock is taken over with a warning. Exit 1 when any pair
    failed, 2 when a pair's run record is unreadable (delete it, or rerun with
    --from provision).

    \b
    Examples:
      dflashops up lab-dflash --dry-run
      dflashops up lab-dflash -c lab-ct1 -c lab-ct2 --parallel 2
      dflashops up lab-dflash --from bench
      dflashops up lab-dflash --wait --wait-timeout 600
    """
    from dflashops.playbook.load import resolve_playbook_path
    from dflashops.up.record import up_state_root
    from dflashops.up.request import UpRequest
    from dflashops.up.runner import run_up

    request = UpRequest(
        playbooks=tuple(resolve_playbook_path(p) for p in playbooks),
        containers=containers,
        dry_run=dry_run,
        from_step=from_step,
        parallel=parallel,
        fix_drafter=fix_drafter,
        force=force,
        wait=wait or wait_timeout is not None,
        wait_timeout_s=wait_timeout or DEFAULT_WAIT_S,
        state_dir=up_state_root(),
    )
    inventory = app.inventory()
    from dflashops.cli.up_view import render_result, up_lines

    with up_lines(inventory, request, enabled=not as_json) as on_event:
        result = run_up(inventory, request, on_event=on_event)
    render_result(result, as_json=as_json)
    if result.exit_code:
        ctx.exit(result.exit_code)
