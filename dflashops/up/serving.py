"""Whether the server ``launch`` left in a pair's container still serves.

A launch done with the same inputs says nothing about a server killed since: ``up`` asks this
before it skips ``launch`` (and the steps after it, which need its server), so a rerun after a
crash starts it again instead of saying "nothing to do".
"""

from __future__ import annotations

from dflashops.launch.status import ServerStatus, server_status
from dflashops.remote import SshConnection


def serving_problem(status: ServerStatus, playbook: str) -> str | None:
    """Why ``status`` is not the pair's server serving (None: it is), in ``status``'s words."""
    if status.problem:
        return status.problem  # e.g. a deployed.json that cannot be read
    if not status.deployed:
        return "nothing is deployed"
    if status.playbook != playbook:
        return f"the container serves playbook {status.playbook} now"
    if not status.running:
        return "deployed, not running"
    if not status.listening:
        return f"running (pid {status.pid}) but port {status.port or '?'} is not listening"
    return None


def server_serving(conn: SshConnection, playbook: str) -> str | None:
    """:func:`serving_problem` of the container ``conn`` reaches (one SSH command)."""
    return serving_problem(server_status(conn), playbook)
