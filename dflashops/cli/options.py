"""Options several commands share, spelled once so their help reads the same everywhere."""

from __future__ import annotations

import click

# A container's playbook: -p names one, else deployment.playbooks finds the one naming it.
playbook_option = click.option(
    "-p",
    "--playbook",
    "playbook_name",
    metavar="PLAYBOOK",
    help="Playbook NAME or FILE. Default: the one playbook whose container: is NAME.",
)
