"""Gathering for doctor's drafter-check rule: the playbook method's drafter check
(:func:`dflashops.launch.validation.validate`, what ``launch`` runs) on the container's files
as they are now, and the ``drafter check`` command that shows it in full."""

from __future__ import annotations

import shlex

from dflashops.doctor.facts import DrafterCheckFacts
from dflashops.errors import DflashopsError
from dflashops.launch.validation import validate
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection


def check_drafter(
    conn: SshConnection, playbook: Playbook | None, container: str, served_method: str | None
) -> tuple[DrafterCheckFacts | None, str]:
    """The check's facts, or None and why it was not run."""
    if playbook is None:
        return None, "no playbook: the method's drafter check needs one (-p)"
    method = playbook.drafter.method
    if served_method not in (None, method):
        return None, (
            f"the server runs {served_method}, the playbook names {method}: the server rule "
            "says which is right"
        )
    try:
        validation, _ = validate(conn, playbook)
    except DflashopsError as exc:
        return None, f"drafter check not run: {exc.one_line()}"
    return DrafterCheckFacts(validation, method, check_command(playbook, container)), ""


def check_command(playbook: Playbook, container: str) -> str:
    """``dflashops drafter check`` on the container's drafter (MTP: the target's own layers;
    n-gram, suffix: the target, for their parameters) with the playbook's method and engine."""
    drafter, target = playbook.drafter, f"{container}:{playbook.model.path}"
    files = f"{container}:{drafter.model.path}" if drafter.model is not None else target
    engine = f"{playbook.engine.name}=={playbook.engine.version}"
    words = ["dflashops", "drafter", "check", files, "--target", target]
    return shlex.join([*words, "--method", drafter.method, "--engine", engine])
