"""Options several commands share, spelled once so their help reads the same everywhere."""

from __future__ import annotations

import click

from dflashops.cli.context import AppContext

# A container's playbook: -p names one, else deployment.playbooks finds the one naming it.
playbook_option = click.option(
    "-p",
    "--playbook",
    "playbook_name",
    metavar="PLAYBOOK",
    help="Playbook NAME or FILE. Default: the one playbook whose container: is NAME.",
)


def _skip_pve_check(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(AppContext).skip_pve_check = True


# Every command that works inside a container first asks PVE that the container is one
# dflashops manages (deployment.managed); this is the operator's way round a PVE that is down.
skip_pve_check_option = click.option(
    "--skip-pve-check",
    is_flag=True,
    expose_value=False,
    callback=_skip_pve_check,
    help="Do not ask PVE that NAME is a container dflashops manages (tag, hostname, vmid) "
    "before acting on the inventory's address: for when PVE is down. Warns.",
)
