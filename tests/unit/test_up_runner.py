"""``up``'s runner with injected steps (no root, no SSH, no vLLM): one connection per pair per
run, resume after a failure, Ctrl-C at a safe point, one pair's crash never stopping another,
a shorter step table stopping early, and typed outputs read back from the record."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dflashops.deployment.access import ContainerAccess
from dflashops.deployment.managed import ManagedCheck
from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.playbook.load import resolve_playbook_path
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection
from dflashops.up.inputs import DrafterFiles
from dflashops.up.outcome import UpResult
from dflashops.up.outputs import (
    BenchNumbers,
    DrafterOutput,
    LaunchOutput,
    ProvisionOutput,
    ReportOutput,
    SmokeOutput,
    StepOutput,
    TuneOutput,
)
from dflashops.up.plan import STEPS
from dflashops.up.record import UpError, load_record
from dflashops.up.request import UpRequest
from dflashops.up.runner import UpParts, run_up
from dflashops.up.steps import PairWork, StepFunction, steps_until

INVENTORY = """\
version: 1
clusters:
  lab:
    api_url: https://127.0.0.1:8006
    auth: {user: root@pam, password: {env: PVE_PASSWORD}}
    nodes: {lab: {ssh: {host: 127.0.0.1}}, lab2: {ssh: {host: 127.0.0.2}}}
containers:
  lab-ct1: {vmid: 200, node: lab, network: {ip: 10.200.0.10/24}}
  lab-ct2: {vmid: 201, node: lab2, network: {ip: 10.200.0.11/24}}
"""
PAIRS = ("lab-dflash@lab.lab-ct1", "lab-dflash@lab.lab-ct2")


class Rig:
    """Fake steps that each use the pair's connection twice, a counting connect, a serving probe
    (``down``: container -> why its server is not serving; the fake launch serves again), and a
    log of what ran in which order."""

    def __init__(self, tmp_path: Path) -> None:
        (tmp_path / "inv.yaml").write_text(INVENTORY)
        self.inventory: Inventory = load_inventory(tmp_path / "inv.yaml")
        self.state = tmp_path / "up"
        self.connects: Counter[str] = Counter()
        self.locks: Counter[str] = Counter()
        self.events: list[str] = []
        self.files = DrafterFiles("config-1", "weights-1")
        self.fail: dict[tuple[str, str], BaseException] = {}
        self.during: dict[tuple[str, str], Callable[[], None]] = {}
        self.down: dict[str, str] = {}
        self.lock = threading.Lock()
        self.result: UpResult | None = None

    def connect(self, inventory: Inventory, name: str) -> ContainerAccess:
        with self.lock:
            self.connects[name] += 1
            self.events.append(f"{name}: connect")
        container = inventory.container(name)
        # never opened: the fake steps only ask for it
        conn = SshConnection("10.200.0.99", user="root", name=name)
        return ContainerAccess(name, container, "10.200.0.99", conn, ManagedCheck(name, 1, "lab"))

    @contextmanager
    def container_lock(
        self, conn: SshConnection, name: str, wait_s: float | None
    ) -> Iterator[None]:
        """The container's lock for the pair's run (deployment.lock holds it for real)."""
        with self.lock:
            self.events.append(f"{name}: lock")
            self.locks[name] += 1
        yield

    def fingerprint(self, conn: SshConnection, container: str, book: Playbook) -> DrafterFiles:
        with self.lock:
            self.events.append(f"{container}: fingerprint")
        return self.files

    def serving(self, conn: SshConnection, playbook: str) -> str | None:
        with self.lock:
            self.events.append(f"{conn.name}: serving?")
        return self.down.get(conn.name)

    def step(self, name: str, output: Callable[[PairWork], StepOutput]) -> StepFunction:
        def run(work: PairWork) -> tuple[str, StepOutput]:
            if name != "provision":  # the container exists once provision has run
                assert work.access() is work.access()
            with self.lock:
                self.events.append(f"{work.container}: {name}")
            hook = self.during.get((work.container, name))
            if hook is not None:
                hook()
            failure = self.fail.pop((work.container, name), None)
            if failure is not None:
                raise failure
            if name == "launch":
                self.down.pop(work.container, None)
            return f"{name} done", output(work)

        return run

    def table(self) -> dict[str, StepFunction]:
        outputs: dict[str, Callable[[PairWork], StepOutput]] = {
            "provision": lambda w: ProvisionOutput(action="create", vmid=200),
            "drafter": lambda w: DrafterOutput(status="clean"),
            "launch": lambda w: LaunchOutput(action="started", endpoint=f"http://{w.container}/v1"),
            # smoke reads launch's endpoint back, typed, also when launch was skipped
            "smoke": lambda w: SmokeOutput(reply=LaunchOutput.read(w.record).endpoint),
            "bench": lambda w: BenchNumbers(k=4, output_throughput=41.5),
            "tune": lambda w: TuneOutput(asked=False),
            "report": lambda w: ReportOutput(files=[]),
        }
        return {name: self.step(name, out) for name, out in outputs.items()}

    def up(
        self,
        *containers: str,
        steps: dict[str, StepFunction] | None = None,
        stop: threading.Event | None = None,
        on_event: Callable[[str, str, str], None] | None = None,
        **options: Any,
    ) -> dict[str, str]:
        """Run ``up`` (``options``: UpRequest's, e.g. dry_run, from_step, wait); the outcome per
        container, the whole result in ``self.result``."""
        book = resolve_playbook_path("lab-dflash")
        request = UpRequest(
            playbooks=(book,), containers=containers, state_dir=self.state, **options
        )
        parts = UpParts(
            steps=steps or self.table(),
            connect=self.connect,
            fingerprint=self.fingerprint,
            serving=self.serving,
            lock=self.container_lock,
        )
        self.events.clear()
        self.result = run_up(self.inventory, request, parts=parts, stop=stop, on_event=on_event)
        return {pair.container: pair.outcome for pair in self.result.pairs}

    def ran(self, container: str) -> list[str]:
        steps = [e.split(": ", 1)[1] for e in self.events if e.startswith(f"{container}: ")]
        return [s for s in steps if s in STEPS]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def test_each_pair_runs_its_steps_over_one_connection(rig: Rig) -> None:
    assert rig.up("lab-ct1", "lab-ct2") == {"lab-ct1": "done", "lab-ct2": "done"}
    assert rig.connects == {"lab-ct1": 1, "lab-ct2": 1}
    assert rig.locks == {"lab-ct1": 1, "lab-ct2": 1}  # each container's one writer, once
    for name in ("lab-ct1", "lab-ct2"):
        assert rig.ran(name) == list(STEPS)
        # provision ran first, so the container was not reached before it
        mine = [e for e in rig.events if e.startswith(f"{name}: ")]
        assert mine.index(f"{name}: provision") < mine.index(f"{name}: connect")
    record = load_record(rig.state, PAIRS[0])
    assert record is not None
    assert SmokeOutput.read(record).reply == "http://lab-ct1/v1"
    assert BenchNumbers.read(record).output_throughput == 41.5


def test_a_rerun_with_nothing_changed_reads_the_files_once_and_runs_nothing(rig: Rig) -> None:
    rig.up("lab-ct1")
    assert rig.up("lab-ct1") == {"lab-ct1": "unchanged"}
    # and asks once whether the server launch left is serving (it is: nothing runs); the
    # container is locked from its connection on, as in every run that may change it
    assert rig.events == [
        "lab-ct1: connect",
        "lab-ct1: lock",
        "lab-ct1: fingerprint",
        "lab-ct1: serving?",
    ]
    rig.files = DrafterFiles("config-2", "weights-1")  # a pushed drafter config
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    assert rig.ran("lab-ct1") == ["drafter", "launch", "smoke", "bench", "tune", "report"]
    assert rig.connects["lab-ct1"] == 3 and rig.locks["lab-ct1"] == 3  # one per run


def test_a_failed_step_is_where_the_next_run_starts(rig: Rig) -> None:
    rig.fail[("lab-ct1", "bench")] = UpError("every bench request failed")
    assert rig.up("lab-ct1") == {"lab-ct1": "failed"}
    record = load_record(rig.state, PAIRS[0])
    assert record is not None and record.steps["bench"].status == "failed"
    assert record.steps["tune"].status == "pending"
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    assert rig.ran("lab-ct1") == ["bench", "tune", "report"]


def test_ctrl_c_stops_after_the_step_in_progress_and_the_next_run_continues(rig: Rig) -> None:
    stop = threading.Event()
    rig.during[("lab-ct1", "launch")] = stop.set
    assert rig.up("lab-ct1", stop=stop) == {"lab-ct1": "interrupted"}
    assert rig.ran("lab-ct1") == ["provision", "drafter", "launch"]
    record = load_record(rig.state, PAIRS[0])
    assert record is not None
    assert record.steps["launch"].status == "ok" and record.steps["smoke"].status == "pending"
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    assert rig.ran("lab-ct1") == ["smoke", "bench", "tune", "report"]


def test_one_pairs_crash_never_stops_the_other(rig: Rig) -> None:
    rig.fail[("lab-ct1", "launch")] = RuntimeError("a bug")
    rig.fail[("lab-ct2", "drafter")] = DflashopsError("drafter check found 3 error(s)")
    outcomes = rig.up("lab-ct1", "lab-ct2")
    assert outcomes == {"lab-ct1": "failed", "lab-ct2": "failed"}
    first, second = (load_record(rig.state, pair) for pair in PAIRS)
    assert first is not None and first.steps["launch"].error == "RuntimeError: a bug"
    assert second is not None and second.steps["drafter"].error is not None
    # the first pair's drafter step and the second's provision ran regardless
    assert first.steps["drafter"].status == "ok" and second.steps["provision"].status == "ok"


def test_a_shorter_table_stops_after_its_last_step(rig: Rig) -> None:
    table = steps_until("provision", rig.table())
    assert rig.up("lab-ct1", "lab-ct2", steps=table) == {"lab-ct1": "stopped", "lab-ct2": "stopped"}
    assert rig.ran("lab-ct1") == ["provision"]
    assert rig.connects == {"lab-ct1": 1, "lab-ct2": 1}  # the files read for the digests
    record = load_record(rig.state, PAIRS[0])
    assert record is not None and set(record.steps) == {"provision"}
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    assert rig.ran("lab-ct1") == list(STEPS[1:])


def test_an_unreachable_container_fails_its_first_step_that_needs_it(rig: Rig) -> None:
    def refused(inventory: Inventory, name: str) -> ContainerAccess:
        raise DflashopsError(f"{name} does not exist in PVE cluster lab")

    rig.connect = refused  # type: ignore[method-assign]
    assert rig.up("lab-ct1") == {"lab-ct1": "failed"}
    record = load_record(rig.state, PAIRS[0])
    assert record is not None
    assert record.steps["provision"].status == "ok"
    assert record.steps["drafter"].error == "lab-ct1 does not exist in PVE cluster lab"


def test_a_dry_run_reads_the_container_without_locking_it(rig: Rig) -> None:
    rig.up("lab-ct1")
    rig.files = DrafterFiles("config-2", "weights-1")
    assert rig.up("lab-ct1", dry_run=True) == {"lab-ct1": "planned"}
    assert "lab-ct1: fingerprint" in rig.events and "lab-ct1: lock" not in rig.events
    assert rig.ran("lab-ct1") == []
