"""``doctor NAME``: gather the facts over one connection, run every rule, rank the findings."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflashops.deployment.access import connect
from dflashops.deployment.playbooks import playbook_for_container
from dflashops.doctor.diagnose import diagnose
from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import DoctorReport
from dflashops.doctor.gather import gather
from dflashops.errors import DflashopsError
from dflashops.playbook.load import load_playbook
from dflashops.progress import Say, quiet

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.playbook.models import Playbook


@dataclass(frozen=True)
class DoctorRequest:
    """What ``doctor`` examines and how: ``probe`` None probes only an idle server."""

    container: str
    playbook: str | Path | None = None
    window_s: float = 10.0
    probe: bool | None = None


def load_container_playbook(name: str, given: str | Path | None) -> tuple[Playbook | None, str]:
    """``-p``, else the one playbook naming the container; without one doctor still runs (the
    rules that need it say so), so "none" is a note, not an error, unless ``-p`` was given."""
    if given is not None:
        return load_playbook(playbook_for_container(name, given)), ""
    try:
        return load_playbook(playbook_for_container(name)), ""
    except DflashopsError as exc:
        return None, f"no playbook: {exc.one_line()}"


def measured(facts: DoctorFacts) -> dict[str, Any]:
    """The numbers the report shows above the findings."""
    acceptance = facts.acceptance
    return {
        "running": facts.running_argv is not None,
        "engine": f"{facts.engine}=={facts.engine_version}" if facts.engine else None,
        "method": facts.method,
        "k": facts.k,
        "device": facts.device,
        "drafter": facts.drafter.path if facts.drafter else None,
        "reference": facts.entry.name if facts.entry else None,
        "acceptance_source": acceptance.source if acceptance else None,
        "num_drafts": acceptance.num_drafts if acceptance else None,
        "acceptance_length": acceptance.acceptance_length if acceptance else None,
        "per_position_acceptance": list(acceptance.per_position) if acceptance else [],
        "decode_tok_s": acceptance.decode_tok_s if acceptance else None,
        "members": _members(facts),
    }


def _members(facts: DoctorFacts) -> list[dict[str, Any]]:
    """A placement's members as doctor read them (empty for a single container)."""
    if facts.placement is None:
        return []
    return [
        {
            "name": m.name,
            "role": m.role,
            "rank": m.rank,
            "address": m.address,
            "reachable": m.reachable,
            "running": m.running if m.reachable else None,
            "interface": m.interface_of(m.address),
            "env": dict(m.env),
        }
        for m in facts.placement.members
    ]


def report_from(facts: DoctorFacts, endpoint: str | None = None) -> DoctorReport:
    findings, checks = diagnose(facts)
    return DoctorReport(
        container=facts.container,
        endpoint=endpoint,
        measured=measured(facts),
        findings=findings,
        checks=checks,
        notes=list(facts.notes),
    )


def doctor(
    inventory: Inventory,
    request: DoctorRequest,
    *,
    playbook: Playbook | None = None,
    say: Say = quiet,
) -> DoctorReport:
    """Examine container ``request.container``'s server; ``playbook`` replaces ``-p`` lookup."""
    note = ""
    if playbook is None:
        playbook, note = load_container_playbook(request.container, request.playbook)
    with connect(inventory, request.container) as conn:
        facts = gather(
            inventory,
            request.container,
            conn,
            playbook,
            window_s=request.window_s,
            probe=request.probe,
            say=say,
        )
    if note:
        facts.notes.insert(0, note)
    return report_from(facts, facts.manifest.endpoint if facts.manifest else None)
