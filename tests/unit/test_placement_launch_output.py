"""``launch``'s human output for a placement lists its members (the --json already has them)."""

from __future__ import annotations

import pytest

from dflashops.cli.launch import _show_report
from dflashops.launch.group import MemberReport, PlacementLaunchReport


def report(action: str) -> PlacementLaunchReport:
    return PlacementLaunchReport(
        container="lab-ct1",
        host="10.77.0.11",
        playbook="lab-multinode",
        action=action,
        restart_needed=True,
        reason="lab-ct1: first launch",
        endpoint="http://10.77.0.11:8000/v1",
        supervisor="fallback",
        pid=4101,
        ready_in_s=61.2,
        members=[
            MemberReport(
                name="lab-ct1",
                rank=0,
                role="head",
                address="10.77.0.11",
                pid=4101,
                action=action,
                joined_in_s=38.4,
                files_changed=6,
            ),
            MemberReport(
                name="lab-ct2",
                rank=1,
                role="worker",
                address="10.77.0.12",
                pid=5202,
                action=action,
                joined_in_s=37.9,
                files_changed=6,
            ),
        ],
    )


def member_lines(out: str) -> dict[str, list[str]]:
    """Each member's table row, split into cells (ASCII or box drawing separators)."""
    found = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.replace("│", "|").split("|") if c.strip()]
        if cells and cells[0] in ("lab-ct1", "lab-ct2"):
            found[cells[0]] = cells
    return found


def test_a_started_placement_lists_every_member(capsys: pytest.CaptureFixture[str]) -> None:
    _show_report(report("started"))
    out = capsys.readouterr().out
    assert "started lab-multinode on lab-ct1 (pid 4101, ready in 61.2s)" in out
    rows = member_lines(out)
    assert rows["lab-ct1"] == ["lab-ct1", "10.77.0.11", "head", "4101", "38.4s", "6"]
    assert rows["lab-ct2"] == ["lab-ct2", "10.77.0.12", "worker rank 1", "5202", "37.9s", "6"]


def test_a_dry_run_lists_the_members_it_would_start(capsys: pytest.CaptureFixture[str]) -> None:
    dry = report("dry-run")
    for m in dry.members:
        m.pid, m.joined_in_s = None, None
    _show_report(dry)
    rows = member_lines(capsys.readouterr().out)
    assert rows["lab-ct2"][2:5] == ["worker rank 1", "-", "-"]
