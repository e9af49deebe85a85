"""Which exit code a ``status`` result gets: the rule lives in the core
(:func:`dflashops.status.status_failure`), the CLI only raises what it returns."""

from __future__ import annotations

from dflashops.launch.status import ServerStatus
from dflashops.proxmox.errors import ProvisionError
from dflashops.status import StatusRow, status_failure


def row(name: str, state: str, note: str | None = None) -> StatusRow:
    return StatusRow(name=name, cluster="pve", node="pve1", state=state, note=note)


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


def test_a_server_still_loading_says_so_and_strays_are_named() -> None:
    from dflashops.cli.provision import _server_cell
    from dflashops.launch.status import StrayProcess

    entry = row("a", "running")
    entry.server = ServerStatus(
        host="10.0.0.1",
        deployed=True,
        running=True,
        pid=42,
        port=30000,
        listening=False,
        uptime_s=5,
        engine="vllm",
        engine_version="0.32.0",
        method="dflash",
        num_speculative_tokens=4,
        strays=[StrayProcess(pid=7, rss_mb=2100, command="VLLM::EngineCore")],
    )
    cell = _server_cell(entry)
    assert "vllm 0.32.0 dflash k=4, loading (up 0m)" in cell
    assert "1 stray engine process(es) of an earlier server (pid 7; 2100 MB)" in cell
    assert status_failure([entry]) is None  # strays warn; they do not fail status
    entry.server = entry.server.model_copy(update={"listening": True, "strays": []})
    assert "loading" not in _server_cell(entry) and "up 0m" in _server_cell(entry)
