"""Options several commands share, spelled once so their help reads the same everywhere."""

from __future__ import annotations

import math
from typing import Any

import click


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (NaN passes every comparison
    a range makes, and either one turns every prediction downstream into NaN or 0, or a wait
    into forever). Every float option of the CLI uses it."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):  # said first: "inf is not in the range" would mislead
            shown = value if len(str(value)) <= 40 else str(value)[:37] + "..."
            self.fail(f"{shown!r} is not a finite number.", param, ctx)
        return super().convert(number, param, ctx)


class SafePath(click.Path):
    """``click.Path`` that refuses, as a usage error naming the option, what no file can be
    named: an empty text, a NUL byte (``os.stat`` raises ValueError, not "does not exist")."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if not text:
            self.fail("an empty path.", param, ctx)
        if "\x00" in text:
            self.fail("a path cannot hold a NUL byte.", param, ctx)
        return super().convert(value, param, ctx)


# A container's playbook: -p names one, else deployment.playbooks finds the one naming it.
playbook_option = click.option(
    "-p",
    "--playbook",
    "playbook_name",
    metavar="PLAYBOOK",
    help="Playbook NAME or FILE. Default: the one playbook whose container: is NAME.",
)


def _skip_pve_check(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    from dflashops.cli.context import AppContext  # deferred: start-up time (--help)

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


DEFAULT_WAIT_S = 3600  # deployment.lock's: a launch with a model load, a bench, fit in it


def _wait_seconds(ctx: click.Context, _param: click.Parameter, value: int | None) -> None:
    wait = ctx.params.pop("wait_flag", False)
    ctx.params["wait_s"] = float(value) if value is not None else (DEFAULT_WAIT_S if wait else None)


def wait_options(command: Any) -> Any:
    """``--wait`` and ``--wait-timeout SECONDS`` for a command that changes a container: while
    another dflashops command changes it, queue (up to the timeout) instead of failing at once
    with "busy: COMMAND by pid N since T on HOST". The command gets ``wait_s``."""
    command = click.option(
        "--wait-timeout",
        "wait_timeout",
        type=click.IntRange(min=1),
        metavar="SECONDS",
        expose_value=False,
        is_eager=False,
        callback=_wait_seconds,
        help=f"How long --wait waits (implies --wait). [default: {DEFAULT_WAIT_S}]",
    )(command)
    return click.option(
        "--wait",
        "wait_flag",
        is_flag=True,
        is_eager=True,
        help="When another dflashops command is changing the container, wait for it instead of "
        "failing at once with 'busy: COMMAND by pid N since T on HOST'.",
    )(command)
