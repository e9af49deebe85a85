"""``status`` of a placement member: its role, the group's health, and the exit when a member is
down, judged from recorded member states (what ``placement_status`` reads over SSH; the live
read is covered by tests/integration/test_multinode.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dflashops.cli.provision import _server_cell
from dflashops.launch.status import MemberStatus, ServerStatus, group_health, group_view
from dflashops.status import StatusRow, status_failure

RECORD: dict[str, Any] = {
    "playbook": "lab-multinode",
    "role": "worker",
    "rank": 1,
    "members": [
        {"name": "lab-ct1", "rank": 0, "address": "10.77.0.11", "role": "head"},
        {"name": "lab-ct2", "rank": 1, "address": "10.77.0.12", "role": "worker"},
    ],
}


def rows(head: bool | None, worker: bool | None, *, listening: bool = True) -> list[MemberStatus]:
    """The two members' states as ``placement_status`` records them (None: unreachable)."""
    return [
        MemberStatus(
            name="lab-ct1",
            rank=0,
            role="head",
            address="10.77.0.11",
            running=head,
            pid=4101 if head else None,
            listening=listening if head else False,
            error="ssh: connection refused" if head is None else None,
        ),
        MemberStatus(
            name="lab-ct2",
            rank=1,
            role="worker",
            address="10.77.0.12",
            running=worker,
            pid=5202 if worker else None,
            error="ssh: connection refused" if worker is None else None,
        ),
    ]


@pytest.mark.parametrize(
    ("head", "worker", "listening", "health"),
    [
        (True, True, True, "serving"),
        (True, True, False, "starting"),
        (False, False, True, "stopped"),
        (True, False, True, "degraded"),
        (False, True, True, "degraded"),
        (True, None, True, "degraded"),
        (None, False, True, "degraded"),
    ],
)
def test_group_health_from_member_states(
    head: bool | None, worker: bool | None, listening: bool, health: str
) -> None:
    got, problem = group_health(rows(head, worker, listening=listening))
    assert got == health
    assert (problem is not None) == (health == "degraded")


def test_a_dead_worker_is_named_with_its_role_rank_and_address() -> None:
    _, problem = group_health(rows(True, False))
    assert problem == "lab-ct2 (worker, rank 1, 10.77.0.12) not running"


def test_an_unreachable_member_is_named_with_the_ssh_error() -> None:
    _, problem = group_health(rows(True, None))
    assert problem == ("lab-ct2 (worker, rank 1, 10.77.0.12) unreachable: ssh: connection refused")


def test_the_view_carries_the_asking_members_role() -> None:
    view = group_view(RECORD, "lab-ct2", rows(True, True))
    assert (view.role, view.rank, view.nodes, view.health) == ("worker", 1, 2, "serving")
    head = group_view(RECORD, "lab-ct1", rows(True, True))
    assert (head.role, head.rank) == ("head", 0)


def server(name: str, head: bool | None, worker: bool | None) -> ServerStatus:
    """The ``server`` part of a status row, as ``status_probe`` fills it for member ``name``."""
    return ServerStatus(
        host="10.77.0.11",
        running=True,
        deployed=True,
        engine="vllm",
        engine_version="0.12.0",
        method="none",
        uptime_s=125,
        endpoint="http://10.77.0.11:8000/v1",
        placement=group_view(RECORD, name, rows(head, worker)),
    )


def entry(name: str, head: bool | None, worker: bool | None) -> StatusRow:
    return StatusRow(
        name=name,
        cluster="lab",
        node="lab",
        vmid=101,
        state="running",
        server=server(name, head, worker),
    )


def test_the_cell_shows_role_and_group_health() -> None:
    cell = _server_cell(entry("lab-ct1", True, True))
    assert "head of 2 (lab-multinode), group serving" in cell
    assert "not running" not in cell
    worker = _server_cell(entry("lab-ct2", True, True))
    assert "worker rank 1 of 2 (lab-multinode), group serving" in worker
    # a worker serves no HTTP: the endpoint shown is the head's, and says so
    assert "(head's) http://10.77.0.11:8000/v1" in worker


def test_the_cell_names_the_member_that_is_down() -> None:
    cell = _server_cell(entry("lab-ct1", True, False))
    assert "group degraded" in cell
    assert "lab-ct2 (worker): not running" in cell


def test_a_healthy_or_stopped_group_does_not_fail_status() -> None:
    assert status_failure([entry("lab-ct1", True, True), entry("lab-ct2", True, True)]) is None
    assert status_failure([entry("lab-ct1", False, False)]) is None


def test_a_dead_member_fails_status_with_one_line_naming_it() -> None:
    # both members asked about: the group is named once
    failure = status_failure([entry("lab-ct1", True, False), entry("lab-ct2", True, False)])
    assert failure is not None and failure.cli_exit_code == 1
    line, hint = failure.message, failure.hint
    assert line == (
        "placement lab-multinode is degraded: lab-ct2 (worker, rank 1, 10.77.0.12) not running"
    )
    assert "\n" not in line
    assert hint == (
        "read why: dflashops logs lab-ct2; then relaunch the whole group: dflashops launch lab-ct1"
    )
