"""Which exit code a ``status`` result gets: the rule lives in the core
(:func:`dflashops.proxmox.lifecycle.status_failure`), the CLI only raises what it returns."""

from __future__ import annotations

from dflashops.deployment.server_view import ServerStatus
from dflashops.proxmox.errors import ProvisionError
from dflashops.proxmox.lifecycle import ContainerStatus, status_failure


def row(name: str, state: str, note: str | None = None) -> ContainerStatus:
    return ContainerStatus(name=name, cluster="pve", node="pve1", state=state, note=note)


def test_running_stopped_and_absent_rows_exit_0() -> None:
    rows = [row("a", "running"), row("b", "stopped"), row("c", "absent")]
    assert status_failure(rows) is None
    assert status_failure([]) is None


def test_an_unreadable_row_exits_1_naming_it() -> None:
    failure = status_failure([row("a", "running"), row("b", "error", "PVE unreachable")])
    assert isinstance(failure, ProvisionError) and failure.cli_exit_code == 1
    assert failure.message == "status of 1 of 2 container(s) could not be read: b: PVE unreachable"
    assert failure.hint is None


def test_a_refused_row_exits_1_with_the_fix() -> None:
    failure = status_failure([row("a", "refused", "vmid 101 lacks the dflashops tag")])
    assert failure is not None and failure.cli_exit_code == 1
    assert failure.message == (
        "1 of 1 container(s) refused as not managed by dflashops: "
        "a: vmid 101 lacks the dflashops tag"
    )
    assert (
        failure.hint == "fix the inventory's vmid, or the container's tag and hostname, then rerun"
    )


def test_a_server_part_without_a_placement_never_fails_status() -> None:
    served = row("a", "running")
    served.server = ServerStatus(host="10.0.0.1", deployed=True, running=True)
    unreachable = row("b", "running")
    unreachable.server = ServerStatus.unreachable("10.0.0.2", "ssh: connection refused")
    assert status_failure([served, unreachable]) is None
    assert served.placement() is None and unreachable.placement() is None
