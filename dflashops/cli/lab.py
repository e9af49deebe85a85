"""``dflashops lab``: the local lab (PVE double, node host, containers, vLLM on CPU)."""

from __future__ import annotations

import click

from dflashops.cli.context import dump_json
from dflashops.cli.lab_models import models
from dflashops.cli.progress import MAIN, lanes, spinner


@click.group()
def lab() -> None:
    """Run dflashops end to end on this machine, with no Proxmox and no GPU.

    \b
    The lab is a local Proxmox VE API double (HTTPS on 127.0.0.1:8006), a PVE
    node host reachable over SSH (fake pveversion/nvidia-smi/pct, /dev/nvidia*
    nodes), containers that become real SSH hosts in network namespaces on
    bridge dfolab0 (10.200.0.0/24), and real vLLM on the CPU. Needs root.
    """


@lab.command("up")
@click.option("--json", "as_json", is_flag=True, help="Print the status as one JSON document.")
def up(as_json: bool) -> None:
    """Start the lab (idempotent) and write its inventory.

    Every other command then works on it unchanged:
    dflashops -i ~/.local/state/dflashops/lab/inventory.yaml provision
    """
    from dflashops.lab.control import lab_up
    from dflashops.lab.mounts import lab_mounts

    mounts = lab_mounts()
    with spinner("starting the lab", enabled=not as_json) as say:
        status = lab_up(mounts=mounts, progress=say)
    # bind mounts are made when the containers start: a runtime cached since then (lab models
    # --engine) is not in a lab that was already running
    unmounted = sorted(set(mounts) - set(status.mounts))
    if unmounted:
        click.echo(
            f"note: not mounted in the running lab: {', '.join(unmounted)} (cached after it came "
            "up); `dflashops lab down` then `dflashops lab up` mounts it",
            err=True,
        )
    if as_json:
        click.echo(dump_json({**status.to_json(), "unmounted": unmounted}))
        return
    click.echo(f"lab up: PVE API {status.api_url} (CA {status.ca_file})")
    click.echo(f"inventory: {status.inventory}")
    if status.inventory:
        from pathlib import Path

        click.echo(Path(status.inventory).read_text(encoding="utf-8").rstrip())
        click.echo(point_at(status.inventory))


@lab.command("down")
@click.option("--purge", is_flag=True, help="Also remove the cached vLLM venv and lab models.")
def down(purge: bool) -> None:
    """Stop every lab process and remove the lab's state (idempotent)."""
    from dflashops.lab.control import lab_down

    with spinner("stopping the lab") as say:
        stopped = lab_down(purge=purge, progress=say)
    click.echo("lab stopped" if stopped else "lab was not running; state cleaned")


@lab.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def status(as_json: bool) -> None:
    """Show whether the lab runs and every endpoint (PVE API, node, containers, servers)."""
    from dflashops.lab.control import lab_status

    current = lab_status()
    if as_json:
        click.echo(dump_json(current.to_json()))
        return
    if not current.running:
        click.echo("lab is not running (start it with `dflashops lab up`)")
        return
    from rich.table import Table

    from dflashops.cli.console import make_console

    table = Table(title=f"lab (pid {current.pid})")
    table.add_column("endpoint")
    table.add_column("where")
    table.add_row("PVE API", f"{current.api_url} (CA {current.ca_file})")
    table.add_row("inventory", str(current.inventory))
    if current.node:
        table.add_row("node host", str(current.node["ssh"]))
    for ct in current.containers:
        table.add_row(f"CT {ct['vmid']} {ct['name']}", f"{ct['status']} {ct['address'] or ''}")
    for server in current.servers:
        table.add_row(f"server on {server.get('container')}", str(server.get("url")))
    make_console().print(table)
    if current.inventory:
        click.echo(point_at(current.inventory))


def point_at(inventory: str) -> str:
    """How every other command reaches the lab: it is never their default inventory."""
    export = f"export DFLASHOPS_INVENTORY={inventory}"
    return f"use the lab: dflashops -i {inventory} COMMAND, or {export}"


@lab.command("demo")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the demo's report as one JSON document."
)
def demo(as_json: bool) -> None:
    """The main job on the embedded default, replaying the incident dflashops grew from: a
    trained DFlash drafter shipped with a guessed config, caught, corrected, measured, tuned.

    \b
    Built on `dflashops up`, over two pairs run in parallel: the lab playbook
    on lab-ct1 and on lab-ct2 (each step the real command's core call):
      setup  the lab's vLLM CPU runtime and tiny models (built once, cached;
             the DFlash drafter is trained through `drafter train`'s stages);
             lab up: PVE API double, two PVE node hosts, bridge
      0      up, stopping after provision: both containers, in parallel, one
             on each PVE node; then the trained drafter with a hand-guessed
             config (all full_attention, wrong target layers, wrong mask
             token) is staged in lab-ct1
      1      up: the drafter step refuses it, naming the keys; lab-ct2 (no
             drafter staged) fails there on purpose, before any launch: one
             vLLM server at a time on 2 cores
      2      up --force (until bench) on lab-ct1: launch, smoke, bench
             measures the collapse
      3      up --fix-drafter: push the certain keys, launch, smoke, bench
             measures acceptance back up, tune k live (up to 3 launches),
             report; lab-ct2 resumes at its failed step and fails again
    Re-running is safe: each run replays the incident from the start; a k*
    tuned for the same drafter files and playbook is reused. Run records and
    folders: <lab state>/up. On 2 CPU cores a run with everything cached
    takes about 3 minutes.
    """
    from dflashops.cli.up_view import pair_events
    from dflashops.lab.demo import run_demo

    # on stderr even with --json: the demo takes minutes, and stdout stays the one document
    with lanes("lab demo") as tell:
        report = run_demo(
            progress=lambda message: tell(MAIN, message), pair_progress=pair_events(tell)
        )
    if as_json:
        click.echo(dump_json(report.to_json()))
        return
    from dflashops.cli.console import make_console
    from dflashops.cli.lab_demo_view import demo_renderables

    console = make_console()
    for renderable in demo_renderables(report):
        console.print(renderable)


lab.add_command(models)
