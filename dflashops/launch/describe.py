"""A :class:`~dflashops.launch.launch_plan.LaunchPlan` as the report ``launch`` prints: what a dry
run shows, and what a launch fills in as it goes (pids, times, the members' join times)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from dflashops.errors import RemoteError
from dflashops.launch.group import MemberReport, PlacementLaunchReport
from dflashops.launch.launch_plan import LaunchPlan, MemberPlan
from dflashops.launch.plan import spec_diff
from dflashops.launch.report import LaunchAction, LaunchReport
from dflashops.remote import SshConnection, get_text


def member_report(member: MemberPlan, action: str, *, pid: int | None = None) -> MemberReport:
    return MemberReport(
        name=member.name,
        rank=member.rank,
        role="worker" if member.role == "worker" else "head",
        address=member.facts.address,
        pid=pid if pid is not None else member.facts.state.server_pid,
        action=action,
        files_changed=member.files_changed,
    )


def plan_report(plan: LaunchPlan, action: LaunchAction = "dry-run") -> LaunchReport:
    """The report of ``plan`` before anything ran (a dry run prints exactly this)."""
    head = plan.head
    judgement = plan.judgement
    group = plan.placement is not None
    before = head.facts.manifest
    fields = {
        "container": head.name,
        "host": head.facts.address,
        "playbook": plan.playbook,
        "action": action,
        "restart_needed": plan.restart,
        "reason": plan.reason,
        "endpoint": plan.endpoint,
        "supervisor": head.manifest.supervisor,
        "engine_venv": [
            (f"{m.name}: " if group else "") + f"{a.kind}: {a.detail}"
            for m in plan.members
            for a in m.venv_plan.actions
        ],
        "engine_venv_noop": None if group else head.venv_plan.noop_reason,
        "files": list(head.changes),
        "spec_changes": spec_diff(before.spec if before else None, head.manifest.spec)
        if head.rendered is not None
        else [],
        "drafter_validation": judgement.status if judgement else "not run",
        "drafter_findings": judgement.validation.lines() if judgement else [],
        "forced": judgement.forced if judgement else False,
        "warnings": list(plan.warnings),
        "strays": [
            (f"{m.name}: " if group else "") + p.line()
            for m in plan.members
            for p in m.facts.state.strays
        ],
    }
    if plan.placement is None:
        return LaunchReport.model_validate(fields)
    return PlacementLaunchReport.model_validate(
        {
            **fields,
            "runtime": plan.placement.runtime,
            "members": [member_report(m, action) for m in plan.members],
            "firewall": [f"{p.name}: {p.line}" for p in plan.firewall],
            "model_copies": plan.model_copies,
        }
    )


def file_diffs(plan: LaunchPlan, conns: Mapping[str, SshConnection]) -> dict[str, str]:
    """Unified diffs of the head's files a launch would replace (never a secret's)."""
    head = plan.head
    if head.rendered is None:
        return {}
    diffs = {}
    for change in head.changes:
        if change.action != "update" or change.secret:
            continue
        new = head.rendered.file(change.path).content.decode()
        try:
            old = get_text(conns[head.name], change.path)
        except RemoteError as exc:
            old = f"(could not be read: {exc.message})\n"
        diffs[change.path] = "".join(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=f"deployed {change.path}",
                tofile=f"rendered {change.path}",
            )
        )
    return diffs
