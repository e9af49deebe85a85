"""``dflashops launch | stop | restart | logs``: deploy a playbook to a container and run it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dflashops.cli.context import AppContext, dump_json
from dflashops.cli.options import (
    FiniteFloatRange,
    playbook_option,
    skip_pve_check_option,
    wait_options,
)
from dflashops.cli.progress import spinner

if TYPE_CHECKING:  # imported where used: `dflashops --help` stays fast
    from rich.console import Console

    from dflashops.launch.report import LaunchFailed, LaunchReport

pass_app = click.make_pass_decorator(AppContext)

_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
_TIMEOUT = click.option(
    "--timeout",
    "timeout_s",
    type=FiniteFloatRange(min=1, max=7 * 24 * 3600),  # a week: inf or nan would wait forever
    default=900.0,
    show_default=True,
    help="Seconds to wait for readiness (model load included).",
)


def _playbook_path(container: str, given: str | None) -> Path:
    from dflashops.deployment.playbooks import playbook_for_container

    return playbook_for_container(container, given)


@click.command()
@click.argument("name")
@playbook_option
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a dotted playbook key, e.g. --set server.num_speculative_tokens=6.",
)
@click.option("--dry-run", is_flag=True, help="Show what would change; change nothing.")
@click.option("--force", is_flag=True, help="Launch even when the drafter check finds errors.")
@_TIMEOUT
@_JSON
@wait_options
@skip_pve_check_option
@pass_app
def launch(
    app: AppContext,
    *,
    name: str,
    playbook_name: str | None,
    overrides: tuple[str, ...],
    dry_run: bool,
    force: bool,
    timeout_s: float,
    as_json: bool,
    wait_s: float | None,
) -> None:
    """Render the playbook for container NAME, push what changed, (re)start the server and wait
    until it answers a 1-token completion.

    \b
    A launch that changes nothing leaves the running server alone. When the
    new server dies or is not ready in time, the previous files are restored
    and the previous server is started again (exit 1, with the log tail).

    \b
    A playbook with a placement is launched on its head (the first member):
    every member gets its rank's files, the workers start, then the head; the
    launch waits until every member's ranks joined (a member that does not is
    named) and lists the members (address, role, pid, joined in s).
    """
    from dflashops.launch.core import launch as run_launch
    from dflashops.launch.report import LaunchFailed
    from dflashops.playbook.load import load_playbook

    book = load_playbook(_playbook_path(name, playbook_name), overrides)
    inventory = app.inventory()

    def warn(message: str) -> None:
        if not as_json:
            click.secho(f"warning: {message}", fg="yellow", bold=True, err=True)

    try:
        with spinner(f"launch {book.name} on {name}", enabled=not as_json) as say:
            report = run_launch(
                inventory,
                name,
                book,
                dry_run=dry_run,
                force=force,
                progress=say,
                warn=warn,
                timeout_s=timeout_s,
                wait_s=wait_s,
            )
    except LaunchFailed as exc:
        _show_failure(exc, as_json)
        raise
    if as_json:
        click.echo(dump_json(report.model_dump(mode="json")))
        return
    _show_report(report)


def _show_failure(exc: LaunchFailed, as_json: bool) -> None:
    cause = exc.cause
    if as_json:
        click.echo(
            dump_json(
                {
                    "error": exc.one_line(),
                    "cause": cause.code if cause else None,
                    "log_tail": exc.log_tail,
                    "rolled_back": exc.rolled_back,
                    "previous_serving": exc.previous_serving,
                    "endpoint": exc.endpoint,
                }
            )
        )
        return
    if exc.log_tail:
        click.echo("server log (last lines):", err=True)
        for line in exc.log_tail:
            click.echo(f"  {line}", err=True)
    if cause is not None and cause.evidence:
        click.echo(f"cause: {cause.summary}\n  from: {cause.evidence}", err=True)


def _show_report(report: LaunchReport) -> None:
    from dflashops.cli.console import make_console

    console = make_console()
    if report.action == "dry-run":
        _show_plan(console, report)
        return
    if report.action == "unchanged":
        since = report.serving_since.isoformat(timespec="seconds") if report.serving_since else "?"
        console.print(f"unchanged, serving since {since} (pid {report.pid})", highlight=False)
    else:
        console.print(
            f"{report.action} {report.playbook} on {report.container} "
            f"(pid {report.pid}, ready in {report.ready_in_s}s)",
            highlight=False,
        )
    console.print(f"endpoint: {report.endpoint}", highlight=False)
    for line in report.strays:  # stop ended them with the old server, or launch did
        console.print(f"ended a stray of an earlier server: {line}", highlight=False)
    _show_members(console, report)


def _show_members(console: Console, report: LaunchReport) -> None:
    """A placement's members: who runs which rank where, and when each joined the group."""
    from dflashops.launch.group import PlacementLaunchReport

    if not isinstance(report, PlacementLaunchReport) or not report.members:
        return
    from rich.table import Table

    table = Table(title=f"members ({report.runtime} runtime)")
    for column in ("member", "address", "role", "pid", "joined in", "files changed"):
        table.add_column(column, overflow="fold")
    for m in report.members:
        table.add_row(
            m.name,
            m.address,
            "head" if m.role == "head" else f"worker rank {m.rank}",
            str(m.pid) if m.pid is not None else "-",
            f"{m.joined_in_s}s" if m.joined_in_s is not None else "-",
            str(m.files_changed),
        )
    console.print(table)
    if report.model_copies:
        console.print(f"model     {report.model_copies}", highlight=False)
    for line in report.firewall:
        console.print(f"firewall  {line}", highlight=False)


def _show_plan(console: Console, report: LaunchReport) -> None:
    from rich.syntax import Syntax
    from rich.table import Table

    table = Table(title=f"launch {report.playbook} on {report.container} (dry run)")
    table.add_column("file")
    table.add_column("change")
    for change in report.files:
        table.add_row(change.path + (" (secret)" if change.secret else ""), change.action)
    console.print(table)
    for action in report.engine_venv or [f"engine venv: {report.engine_venv_noop}"]:
        console.print(action, highlight=False)
    for line in report.spec_changes:
        console.print(f"spec {line}", highlight=False)
    for diff in report.diffs.values():
        if diff:
            console.print(Syntax(diff, "diff", theme="ansi_dark", word_wrap=True))
    console.print(f"drafter check: {report.drafter_validation}", highlight=False)
    for line in report.strays:
        console.print(f"would end a stray of an earlier server: {line}", highlight=False)
    verdict = "would (re)start the server" if report.restart_needed else "no restart"
    console.print(f"{verdict}: {report.reason}", highlight=False)
    _show_members(console, report)


@click.command()
@click.argument("name")
@_JSON
@wait_options
@skip_pve_check_option
@pass_app
def stop(app: AppContext, name: str, as_json: bool, wait_s: float | None) -> None:
    """Stop the server in container NAME (under systemd also disable it).

    A member of a placement stops its whole group (the ranks cannot run without each other).
    A member that cannot be reached is named and stop exits 1, after stopping the others."""
    from dflashops.launch.control import stop_server

    with spinner(f"stop {name}", enabled=not as_json) as say:
        report = stop_server(app.inventory(), name, wait_s=wait_s, progress=say)
    if as_json:
        click.echo(dump_json(report.model_dump(mode="json")))
    elif report.members:  # a placement: the whole group stopped
        for member in report.members:
            what = "stopped" if member.was_running else "was not running"
            click.echo(
                f"{member.name} ({member.role}): {what}"
                + (f" (pid {member.pid})" if member.pid else "")
            )
    elif report.was_running:
        click.echo(f"stopped the server in {name} (pid {report.pid})")
    else:
        click.echo(f"no server was running in {name}")
    if report.note and not as_json:
        click.secho(f"warning: {report.note}", fg="yellow", err=True)


@click.command()
@click.argument("name")
@_TIMEOUT
@_JSON
@wait_options
@skip_pve_check_option
@pass_app
def restart(
    app: AppContext, name: str, timeout_s: float, as_json: bool, wait_s: float | None
) -> None:
    """Restart the deployed server in container NAME and wait until it is ready."""
    from dflashops.launch.control import restart_server

    with spinner(f"restart {name}", enabled=not as_json) as say:
        report = restart_server(
            app.inventory(), name, progress=say, timeout_s=timeout_s, wait_s=wait_s
        )
    if as_json:
        click.echo(dump_json(report.model_dump(mode="json")))
        return
    click.echo(f"restarted {name} (pid {report.pid}, ready in {report.ready_in_s}s)")
    click.echo(f"endpoint: {report.endpoint}")


@click.command()
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines (Ctrl-C stops).")
@click.option(
    "--lines", "-n", type=click.IntRange(min=0), default=50, show_default=True, help="Lines."
)
@skip_pve_check_option
@pass_app
def logs(app: AppContext, name: str, follow: bool, lines: int) -> None:
    """Print the server log of container NAME (/var/log/dflashops/server.log)."""
    from dflashops.launch.control import follow_logs, read_logs

    if not follow:
        click.echo(read_logs(app.inventory(), name, lines=lines), nl=False)
        return
    try:
        for chunk in follow_logs(app.inventory(), name, lines=lines):
            sys.stdout.write(chunk)
            sys.stdout.flush()
    except KeyboardInterrupt:
        return
