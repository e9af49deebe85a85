"""The ``dflashops`` command line: a lazy Click group over one short module per command.

Only ``click`` is imported here, so ``dflashops --help`` stays fast; each command module imports
the core it needs inside its function. A command is registered by one line in ``COMMANDS`` and
one in ``LISTED`` (what ``--help`` shows for it without importing its module).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from dflashops import __version__
from dflashops.cli.options import SafePath

# name -> "module:attribute"; listed in --help in this order
COMMANDS: dict[str, str] = {
    "inventory": "dflashops.cli.inventory:inventory",
    "playbook": "dflashops.cli.playbook:playbook",
    "provision": "dflashops.cli.provision:provision",
    "destroy": "dflashops.cli.provision:destroy",
    "status": "dflashops.cli.provision:status",
    "up": "dflashops.cli.up:up",
    "drafter": "dflashops.cli.drafter:drafter",
    "launch": "dflashops.cli.launch:launch",
    "stop": "dflashops.cli.launch:stop",
    "restart": "dflashops.cli.launch:restart",
    "logs": "dflashops.cli.launch:logs",
    "bench": "dflashops.cli.bench:bench",
    "parse-log": "dflashops.cli.parse_log:parse_log",
    "report": "dflashops.cli.report:report",
    "tune": "dflashops.cli.tune:tune",
    "tune-offline": "dflashops.cli.tune_offline:tune_offline",
    "compare": "dflashops.cli.compare:compare",
    "doctor": "dflashops.cli.doctor:doctor",
    "watch": "dflashops.cli.watch:watch",
    "lab": "dflashops.cli.lab:lab",
}

# What `dflashops --help` lists for each command, so that listing them imports no command
# module (importing all 19 took half of --help's time): the command's own ``short_help``
# (shown whole), or the first sentence of its help (cut to the terminal's width, as Click cuts
# it). tests/unit/test_cli_frame.py holds each entry to its command and prints the line to
# paste when one differs; a command missing here is imported to be listed.
LISTED: dict[str, dict[str, Any]] = {
    "inventory": {"help": "Inspect the inventory (clusters, nodes, containers)."},
    "playbook": {
        "help": "Inspect playbooks (model, drafter, engine, server args, bench, tune, train)."
    },
    "provision": {"help": "Plan, then create or change containers (all when no NAME is given)."},
    "destroy": {"help": "Stop and delete managed containers (purge=1)."},
    "status": {
        "help": "One view per container: PVE state, vmid, node, address, tags (and the server, "
        "once launched)."
    },
    "up": {
        "help": "Run the whole loop for each PLAYBOOK on the container it names (or each -c): "
        "provision -> drafter -> launch -> smoke -> bench -> tune -> report."
    },
    "drafter": {
        "help": "Validate DFlash drafter configs offline (exit 0 clean, 3 warnings, 4 errors), "
        "correct them in a container, and train new drafters."
    },
    "launch": {
        "help": "Render the playbook for container NAME, push what changed, (re)start the server "
        "and wait until it answers a 1-token completion."
    },
    "stop": {"help": "Stop the server in container NAME (under systemd also disable it)."},
    "restart": {
        "help": "Restart the deployed server in container NAME and wait until it is ready."
    },
    "logs": {"help": "Print the server log of container NAME (/var/log/dflashops/server.log)."},
    "bench": {"short_help": "Benchmark a container's server (or a URL); save the JSON."},
    "parse-log": {"short_help": "Throughput and spec-decode windows from a saved server log."},
    "report": {"short_help": "Render a saved benchmark, or compare several (tables, PNG plots)."},
    "tune": {"short_help": "Choose num_speculative_tokens on a container: launch, bench, verify."},
    "tune-offline": {
        "short_help": "Recommend num_speculative_tokens from measured acceptance and step times."
    },
    "compare": {"short_help": "Launch and bench each engine and speculative method; one table."},
    "doctor": {"short_help": "Why a server is slow or accepts little: ranked findings."},
    "watch": {
        "short_help": "Live view of a server: tok/s, running batch, acceptance per position."
    },
    "lab": {"help": "Run dflashops end to end on this machine, with no Proxmox and no GPU."},
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use, and which maps our errors to exit 1."""

    def __init__(
        self,
        *args: Any,
        lazy: dict[str, str] | None = None,
        listed: dict[str, dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.listed = dict(listed or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*self.lazy, *sorted(super().list_commands(ctx))]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module_name, _, attr = target.partition(":")
        command = getattr(importlib.import_module(module_name), attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's own listing, each lazy command's entry built from ``listed``, not imported."""
        commands: list[tuple[str, click.Command]] = []
        for name in self.list_commands(ctx):
            entry = self.listed.get(name) if name in self.lazy else None
            command = click.Command(name, **entry) if entry else self.get_command(ctx, name)
            if command is not None and not command.hidden:
                commands.append((name, command))
        if commands:
            limit = formatter.width - 6 - max(len(name) for name, _ in commands)
            with formatter.section("Commands"):
                rows = [(name, cmd.get_short_help_str(limit)) for name, cmd in commands]
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from dflashops.cli.context import describe_unexpected
        from dflashops.errors import DflashopsError

        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # Click's own usage errors, one line too: a hostile value it echoes (5,000 digits,
            # control characters) is cut and escaped like ours
            from dflashops.errors import printable, shorten

            text = exc.format_message()
            if len(text) <= 300 and printable(text) == text:
                raise
            raise click.UsageError(shorten(text, 300), ctx=exc.ctx) from exc
        except (click.exceptions.ClickException, click.exceptions.Exit, click.Abort):
            raise  # Click's exits (Exit is a RuntimeError)
        except DflashopsError as exc:
            if _debug(ctx):
                raise
            click.echo(f"error: {exc.one_line()}", err=True)
            ctx.exit(exc.cli_exit_code)
        except Exception as exc:
            # Anything else that escapes a command is still one line, never a traceback:
            # what failed (the file, the value) and exit 1, or 2 for bad input.
            if _debug(ctx):
                raise
            line, code = describe_unexpected(exc)
            click.echo(f"error: {line} (hint: --debug shows the traceback)", err=True)
            ctx.exit(code)


def _debug(ctx: click.Context) -> bool:
    from dflashops.cli.context import AppContext  # deferred: start-up time (--help)

    app = ctx.find_object(AppContext)
    return app is not None and app.debug


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    listed=LISTED,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, "--version", prog_name="dflashops")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.option(
    "-i",
    "--inventory",
    "inventory_path",
    type=SafePath(dir_okay=False),  # a str, made a Path below: pathlib costs --help 4 ms
    envvar="DFLASHOPS_INVENTORY",
    show_envvar=True,
    help="Inventory YAML. Default: ./inventory.yaml (`lab up` prints the lab's).",
)
@click.pass_context
def cli(ctx: click.Context, debug: bool, inventory_path: str | None) -> None:
    """Provision GPU containers on Proxmox, launch vLLM/SGLang with speculative decoding,
    benchmark it and tune num_speculative_tokens.

    \b
    Exit codes: 0 ok, 1 operation failed, 2 usage or invalid input
                (including inventory/playbook errors), 3 drafter check found
                warnings only, 4 drafter check found errors.
    """
    # deferred: --help never runs this callback, and these cost it start-up time
    from pathlib import Path

    from dflashops.cli.context import AppContext
    from dflashops.errors import reset_warnings

    reset_warnings()
    ctx.obj = AppContext(
        debug=debug, inventory_path=None if inventory_path is None else Path(inventory_path)
    )
    if debug:
        import logging

        logging.basicConfig(level=logging.DEBUG, stream=sys.stderr)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="dflashops")
