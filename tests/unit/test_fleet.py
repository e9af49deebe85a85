"""The fleet's parts without PVE (issue 36): bounded parallel work answered in input order, one
failure kept to its item, the shared listing that one request serves many threads with, the
display's finished lines in inventory order, and each container's one line."""

from __future__ import annotations

import io
import threading
import time

import pytest
from rich.console import Console
from rich.progress import Progress

from dflashops.cli.fleet_view import MAX_PARALLEL as CLI_MAX
from dflashops.cli.fleet_view import FinishedLines, LaterTell, LiveFleet
from dflashops.inventory import models
from dflashops.launch.status import ServerStatus
from dflashops.proxmox.clusters import SharedListing
from dflashops.proxmox.fleet import SayTell, run_each
from dflashops.proxmox.identity import Resource
from dflashops.proxmox.lifecycle import DestroyResult
from dflashops.proxmox.report import ContainerReport
from dflashops.status import StatusRow


class Recorder:
    """A :class:`~dflashops.proxmox.fleet.Tell` that keeps what it heard."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, str]] = []

    def __call__(self, name: str, message: str) -> None:
        self.heard.append(("step", name, message))

    def done(self, name: str, line: str) -> None:
        self.heard.append(("done", name, line))


# --------------------------------------------------------------------------- run_each


def test_results_come_back_in_input_order_whatever_order_they_finish_in() -> None:
    finished: list[int] = []
    lock = threading.Lock()

    def work(item: int) -> str:
        time.sleep(0.02 * (5 - item))  # the last item ends first
        with lock:
            finished.append(item)
        return f"r{item}"

    assert run_each(list(range(5)), work, parallel=5) == ["r0", "r1", "r2", "r3", "r4"]
    assert finished[0] == 4 and finished[-1] == 0


def test_at_most_parallel_items_run_at_once_and_all_run() -> None:
    running = peak = 0
    lock = threading.Lock()

    def work(item: int) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return item

    assert run_each(list(range(12)), work, parallel=3) == list(range(12))
    assert peak == 3


def test_items_really_overlap() -> None:
    """Four items that each wait for the other three pass only if they run at once."""
    barrier = threading.Barrier(4, timeout=5)
    assert run_each(list(range(4)), lambda i: barrier.wait() >= 0 and i, parallel=4) == [0, 1, 2, 3]


def test_an_escaping_error_is_raised_once_every_item_has_finished() -> None:
    done: list[int] = []

    def work(item: int) -> int:
        if item == 1:
            raise RuntimeError("bug in item 1")
        time.sleep(0.05)
        done.append(item)
        return item

    with pytest.raises(RuntimeError, match="bug in item 1"):
        run_each([0, 1, 2, 3], work, parallel=4)
    assert sorted(done) == [0, 2, 3]  # the others were not stopped


def test_parallel_one_runs_in_the_callers_thread() -> None:
    me = threading.get_ident()
    assert run_each([1, 2], lambda _i: threading.get_ident() == me, parallel=1) == [True, True]


def test_the_cli_and_the_inventory_agree_on_the_bounds() -> None:
    assert CLI_MAX == models.MAX_PARALLEL
    assert models.InventoryFile.model_fields["parallel"].default == models.DEFAULT_PARALLEL == 8


# --------------------------------------------------------------------------- SharedListing


def resource(vmid: int) -> Resource:
    return Resource(vmid, "lab", f"ct{vmid}", "running", None, ("dflashops",))


class Clock:
    def __init__(self) -> None:
        self.now = 10.0

    def __call__(self) -> float:
        return self.now


def test_one_listing_serves_every_caller_until_a_fresher_one_is_asked_for() -> None:
    clock = Clock()
    calls: list[float] = []

    def fetch() -> list[Resource]:
        calls.append(clock.now)
        return [resource(100 + len(calls))]

    listing = SharedListing(fetch, clock)
    assert [r.vmid for r in listing.get()] == [101]
    assert [r.vmid for r in listing.get()] == [101]
    assert [r.vmid for r in listing.get(not_before=10.0)] == [101]  # sent at 10: fresh enough
    clock.now = 11.0
    assert [r.vmid for r in listing.get(not_before=11.0)] == [102]
    assert listing.get() and listing.requests == 2


def test_threads_waiting_for_a_fresh_listing_share_one_request() -> None:
    clock = Clock()
    release = threading.Event()
    calls: list[str] = []

    def fetch() -> list[Resource]:
        calls.append("sent")
        release.wait(5)
        return [resource(200)]

    listing = SharedListing(fetch, clock)
    got: list[list[Resource]] = []
    threads = [
        threading.Thread(target=lambda: got.append(listing.get(not_before=10.0))) for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    time.sleep(0.1)
    release.set()
    for thread in threads:
        thread.join(5)
    assert len(got) == 6 and calls == ["sent"]


def test_a_failed_listing_lets_the_next_caller_try_again() -> None:
    sent: list[int] = []

    def fetch() -> list[Resource]:
        sent.append(1)
        if len(sent) == 1:
            raise OSError("refused")
        return [resource(300)]

    listing = SharedListing(fetch, Clock())
    with pytest.raises(OSError, match="refused"):
        listing.get()
    assert [r.vmid for r in listing.get()] == [300]


def test_uptime_is_no_change_to_a_plan() -> None:
    then = Resource(1, "lab", "a", "running", None, (), uptime=5)
    assert then == Resource(1, "lab", "a", "running", None, (), uptime=65)
    assert len({then, Resource(1, "lab", "a", "running", None, (), uptime=9)}) == 1


# --------------------------------------------------------------------------- FinishedLines


def test_finished_lines_are_written_in_inventory_order() -> None:
    written: list[str] = []
    lines = FinishedLines("provisioning", ["a", "b", "c"], written.append, clock=Clock())
    lines("b", "creating CT 401")
    lines.done("c", "c: created")
    lines.done("b", "b: created")
    assert written == []  # a is not finished: nothing may jump ahead of it
    lines.done("a", "a: failed: boom")
    assert written == [
        "provisioning: a: failed: boom",
        "provisioning: b: created",
        "provisioning: c: created",
    ]


def test_a_silent_run_says_whom_it_waits_for() -> None:
    clock = Clock()
    written: list[str] = []
    lines = FinishedLines("status", ["a", "b"], written.append, clock=clock, heartbeat_s=30)
    lines("a", "reading its server over SSH (10.0.0.5)")
    lines.done("b", "b: running")
    clock.now += 10
    lines.beat()
    assert written == []
    clock.now += 25
    lines.beat()
    assert written == [
        "status: 1 of 2 finished after 35s; next in order: a: reading its server over SSH "
        "(10.0.0.5)"
    ]


def test_closing_early_writes_what_finished_behind_an_unfinished_one() -> None:
    written: list[str] = []
    lines = FinishedLines("", ["a", "b"], written.append, clock=Clock())
    lines.done("b", "b: destroyed")
    lines.close()
    assert written == ["b: destroyed"]


def test_a_later_display_hears_nothing_before_it_starts() -> None:
    later, recorder = LaterTell(), Recorder()
    later("a", "early")
    later.start(recorder)
    later("a", "stopping CT 401")
    later.done("a", "a: destroyed")
    assert recorder.heard == [("step", "a", "stopping CT 401"), ("done", "a", "a: destroyed")]


def test_a_single_callback_hears_each_container_by_name() -> None:
    said: list[str] = []
    tell = SayTell(said.append)
    tell("ct1", "creating CT 401")
    tell.done("ct1", "ct1: created (vmid 401, node lab)")
    assert said == ["ct1: creating CT 401", "ct1: created (vmid 401, node lab)"]


# --------------------------------------------------------------------------- one line each


def test_a_provision_entry_in_one_line() -> None:
    entry = ContainerReport(name="ct1", cluster="c", node="lab", vmid=401, action="create")
    entry.steps = ["create container (vmid 401)", "start"]
    entry.guest_steps = ["planned once the container is reachable over SSH"]
    assert entry.plan_line() == "ct1: create (vmid 401, node lab, 2 steps)"
    entry.applied, entry.address = ["create container (vmid 401)", "start"], "10.0.0.5"
    assert entry.result_line() == "ct1: created (vmid 401, node lab, 10.0.0.5)"
    same = ContainerReport(name="ct2", cluster="c", node="lab2", vmid=402, action="unchanged")
    same.applied = ["replanned: CT 402 config changed since planning"]
    assert same.result_line() == "ct2: unchanged (vmid 402, node lab2)"
    same.applied.append("start")
    assert same.result_line() == "ct2: changed (vmid 402, node lab2, 1 step)"
    failed = ContainerReport(name="ct3", cluster="c", node="lab", action="change")
    failed.error = "ct3: cannot log in over SSH: refused"
    assert failed.result_line() == "ct3: failed: cannot log in over SSH: refused"
    refused = ContainerReport(name="ct4", cluster="c", node="lab", action="refused")
    refused.issues = ["vmid 404 is named 'x', not 'ct4'"]
    assert refused.plan_line() == "ct4: refused: vmid 404 is named 'x', not 'ct4'"


def test_a_status_row_and_a_destroy_result_in_one_line() -> None:
    row = StatusRow(name="ct1", cluster="c", node="lab", vmid=401, state="running")
    row.address = "10.0.0.5"
    row.server = ServerStatus(
        host="10.0.0.5", deployed=True, running=True, engine="vllm", engine_version="0.32.0"
    )
    assert row.line() == "ct1: running (vmid 401, node lab, 10.0.0.5), server vllm 0.32.0 running"
    absent = StatusRow(name="ct2", cluster="c", node="lab2")
    assert absent.line() == "ct2: absent (lab2)"
    gone = DestroyResult(name="ct1", node="lab", vmid=401, outcome="failed", note="CT is locked")
    assert gone.line() == "ct1 (vmid 401) on lab: failed: CT is locked"


def test_a_terminal_keeps_one_line_per_container_in_order_under_a_count() -> None:
    progress = Progress(console=Console(file=io.StringIO(), force_terminal=True))
    live = LiveFleet(progress, "provisioning", ["a", "b", "c"])
    live("c", "creating CT 403")
    live.done("b", "b: created (vmid 402, node lab)")
    assert [task.description for task in progress.tasks] == [
        "provisioning: 1 of 3 finished",
        "a: waiting",
        "b: created (vmid 402, node lab)",
        "c: creating CT 403",
    ]
    assert [task.finished for task in progress.tasks[1:]] == [False, True, False]
