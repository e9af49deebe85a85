"""``up`` under faults (issue 32), with injected steps (no root, no SSH, no vLLM): a server that
died after its launch, a run record that cannot be read, and two ``up`` runs on one pair (a real
second process, for ``flock``). After each fault a plain rerun converges."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.cli.context import dump_json
from dflashops.errors import RemoteError
from dflashops.launch.status import ServerStatus
from dflashops.up.lock import LOCK_FILE, PairBusy, holder_now, take_lock
from dflashops.up.outcome import PairResult, UpResult
from dflashops.up.plan import STEPS
from dflashops.up.record import RECORD_FILE, load_record, pair_dir
from dflashops.up.serving import serving_problem
from tests.unit.test_up_runner import PAIRS, Rig

REPO = Path(__file__).resolve().parents[2]
AFTER_LAUNCH = ["launch", "smoke", "bench", "tune", "report"]


@pytest.fixture
def rig(tmp_path: Path) -> Rig:
    return Rig(tmp_path)


def result(rig: Rig) -> UpResult:
    assert rig.result is not None
    return rig.result


def planned(pair: PairResult, step: str) -> tuple[str, str]:
    entry = next(p for p in pair.plan if p.step == step)
    return entry.action, entry.reason


# ---------------------------------------------------------------- item 3: a dead server


def test_a_dead_server_is_launched_again_and_the_rerun_converges(rig: Rig) -> None:
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    rig.down["lab-ct1"] = "deployed, not running"  # the server was killed since
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    assert rig.ran("lab-ct1") == AFTER_LAUNCH  # the steps after launch need its server
    pair = result(rig).pair("lab-ct1")
    assert planned(pair, "launch") == (
        "run",
        "the server it launched is not serving (deployed, not running)",
    )
    assert planned(pair, "smoke") == ("run", "launch runs again before it")
    assert rig.up("lab-ct1") == {"lab-ct1": "unchanged"}


def test_a_dry_run_says_the_server_is_not_serving_and_changes_nothing(rig: Rig) -> None:
    rig.up("lab-ct1")
    rig.down["lab-ct1"] = "running (pid 4242) but port 8000 is not listening"
    assert rig.up("lab-ct1", dry_run=True) == {"lab-ct1": "planned"}
    action, reason = planned(result(rig).pair("lab-ct1"), "launch")
    assert action == "run" and "port 8000 is not listening" in reason
    assert rig.ran("lab-ct1") == [] and "lab-ct1" in rig.down


def test_a_pair_whose_launch_never_succeeded_is_not_probed(rig: Rig) -> None:
    rig.fail[("lab-ct1", "drafter")] = RuntimeError("drafter check crashed")
    assert rig.up("lab-ct1") == {"lab-ct1": "failed"}
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    assert "lab-ct1: serving?" not in rig.events


def test_an_unreachable_container_is_a_reason_to_launch_again(rig: Rig) -> None:
    rig.up("lab-ct1")

    def refused(conn: object, playbook: str) -> str | None:
        raise RemoteError("connection refused", host="lab-ct1")

    rig.serving = refused  # type: ignore[method-assign]
    assert rig.up("lab-ct1", dry_run=True) == {"lab-ct1": "planned"}
    action, reason = planned(result(rig).pair("lab-ct1"), "launch")
    assert action == "run" and "lab-ct1: connection refused" in reason


def test_serving_is_judged_from_what_status_reads() -> None:
    def status(**values: object) -> ServerStatus:
        base: dict[str, object] = {
            "host": "ct", "deployed": True, "running": True, "pid": 7, "port": 8000,
            "listening": True, "playbook": "lab-dflash",
        }  # fmt: skip
        return ServerStatus.model_validate({**base, **values})

    assert serving_problem(status(), "lab-dflash") is None
    assert serving_problem(status(running=False, pid=None), "lab-dflash") == "deployed, not running"
    assert serving_problem(status(listening=False), "lab-dflash") == (
        "running (pid 7) but port 8000 is not listening"
    )
    assert serving_problem(status(deployed=False), "lab-dflash") == "nothing is deployed"
    assert serving_problem(status(playbook="other"), "lab-dflash") == (
        "the container serves playbook other now"
    )
    broken = status(deployed=False, problem="deployed.json: not JSON")
    assert serving_problem(broken, "lab-dflash") == "deployed.json: not JSON"


# ---------------------------------------------------------------- item 7: a corrupt record


def record_file(rig: Rig, pair: str = PAIRS[0]) -> Path:
    return pair_dir(rig.state, pair) / RECORD_FILE


def test_a_truncated_record_fails_its_pair_only_with_exit_2_and_from_provision_converges(
    rig: Rig,
) -> None:
    assert rig.up("lab-ct1", "lab-ct2") == {"lab-ct1": "done", "lab-ct2": "done"}
    path = record_file(rig)
    path.write_bytes(path.read_bytes()[:200])  # a disk filled up, a copy cut short
    assert rig.up("lab-ct1", "lab-ct2", from_step="bench") == {
        "lab-ct1": "failed",
        "lab-ct2": "done",
    }
    run = result(rig)
    broken = run.pair("lab-ct1")
    assert broken.error is not None and str(path) in broken.error
    assert "--from provision" in broken.error and "delete" in broken.error
    assert run.exit_code == 2  # invalid input: the state file is not what it claims
    document = json.loads(dump_json(run.to_json()))  # one document, each pair with its error
    assert [p["error"] is None for p in document["pairs"]] == [False, True]
    # --from provision starts the broken pair afresh; the unreadable file is kept aside
    assert rig.up("lab-ct1", from_step="provision") == {"lab-ct1": "done"}
    assert rig.ran("lab-ct1") == list(STEPS)
    assert any(str(path) in w for w in result(rig).pair("lab-ct1").warnings)
    assert [p.name for p in path.parent.glob(f"{RECORD_FILE}.unreadable-*")] != []
    assert rig.up("lab-ct1", "lab-ct2") == {"lab-ct1": "unchanged", "lab-ct2": "unchanged"}
    assert result(rig).exit_code == 0


def test_a_dry_run_plans_the_healthy_pair_beside_a_record_that_is_not_json(rig: Rig) -> None:
    rig.up("lab-ct1", "lab-ct2")
    record_file(rig).write_text("this is not json\n")
    assert rig.up("lab-ct1", "lab-ct2", dry_run=True) == {
        "lab-ct1": "failed",
        "lab-ct2": "planned",
    }
    run = result(rig)
    assert run.exit_code == 2
    assert [p.action for p in run.pair("lab-ct2").plan] == ["skip"] * len(STEPS)
    assert "not an up run record" in (run.pair("lab-ct1").error or "")
    assert rig.ran("lab-ct1") == rig.ran("lab-ct2") == []


@pytest.mark.parametrize(
    "content",
    [b'{"pair": "x", "steps": []}', b"\xff\xfe not even text", b"", b"[1, 2, 3]"],
    ids=["wrong schema", "not utf-8", "empty", "a list"],
)
def test_a_record_of_the_wrong_shape_deleted_lets_the_plain_rerun_converge(
    rig: Rig, content: bytes
) -> None:
    rig.up("lab-ct1")
    path = record_file(rig)
    path.write_bytes(content)
    assert rig.up("lab-ct1") == {"lab-ct1": "failed"}
    assert result(rig).exit_code == 2
    error = result(rig).pair("lab-ct1").error or ""
    assert error.startswith(f"{path}: not an up run record"), error
    path.unlink()  # what the hint says
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    assert rig.up("lab-ct1") == {"lab-ct1": "unchanged"}


# ---------------------------------------------------------------- item 4: two runs on one pair

# the first run, in a process of its own: the same rig (same state folder), holding in launch
# until its stdin gets a line
FIRST_RUN = """
import sys
from pathlib import Path
from tests.unit.test_up_runner import Rig

rig = Rig(Path(sys.argv[1]))
def hold() -> None:
    print("in launch", flush=True)
    sys.stdin.readline()
rig.during[("lab-ct1", "launch")] = hold
print(rig.up("lab-ct1")["lab-ct1"], flush=True)
"""


class FirstRun:
    def __init__(self, tmp_path: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", FIRST_RUN, str(tmp_path)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(tmp_path / "first-run.err").open("wb"),
            text=True,
        )
        self.err = tmp_path / "first-run.err"
        assert self.line(60.0) == "in launch", self.err.read_text()

    @property
    def pid(self) -> int:
        return self.process.pid

    def line(self, timeout: float) -> str:
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        assert ready, f"the first run said nothing in {timeout} s: {self.err.read_text()}"
        return self.process.stdout.readline().strip()

    def go_on(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def finish(self) -> str:
        self.go_on()
        outcome = self.line(60.0)
        assert self.process.wait(30) == 0, self.err.read_text()
        return outcome

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


@pytest.fixture
def first_run(tmp_path: Path) -> Iterator[FirstRun]:
    run = FirstRun(tmp_path)
    yield run
    if run.process.poll() is None:
        run.kill()


def test_a_second_run_on_a_busy_pair_fails_at_once_and_says_who(
    rig: Rig, first_run: FirstRun
) -> None:
    lock_text = (pair_dir(rig.state, PAIRS[0]) / LOCK_FILE).read_text()
    host = socket.gethostname()
    assert lock_text.startswith(f"up by pid {first_run.pid} since ")
    assert lock_text.rstrip().endswith(f" on {host}")
    clock = time.monotonic()
    assert rig.up("lab-ct1", "lab-ct2") == {"lab-ct1": "failed", "lab-ct2": "done"}
    assert time.monotonic() - clock < 10
    error = result(rig).pair("lab-ct1").error or ""
    assert error.startswith(f"busy: up by pid {first_run.pid} since "), error
    assert f"(on {host})" in error and "--wait" in error
    assert rig.ran("lab-ct1") == []
    record = load_record(rig.state, PAIRS[0])  # the first run's, untouched
    assert record is not None and record.steps["launch"].status == "running"
    # a dry run takes no lock, plans, and says the pair is busy
    assert rig.up("lab-ct1", dry_run=True) == {"lab-ct1": "planned"}
    assert any(
        n.startswith(f"busy: up by pid {first_run.pid}") for n in result(rig).pair("lab-ct1").notes
    )
    assert first_run.finish() == "done"
    assert rig.up("lab-ct1") == {"lab-ct1": "unchanged"}


def test_wait_queues_behind_the_first_run_then_runs(rig: Rig, first_run: FirstRun) -> None:
    said: list[str] = []
    threading.Timer(1.5, first_run.go_on).start()
    outcomes = rig.up("lab-ct1", wait=True, on_event=lambda _p, _s, message: said.append(message))
    # the first run finished every step; the second read its record under the lock
    assert outcomes == {"lab-ct1": "unchanged"}
    assert first_run.line(60.0) == "done"
    assert any(m.startswith(f"busy: up by pid {first_run.pid}") and "waiting" in m for m in said)


def test_wait_gives_up_after_its_timeout(rig: Rig, first_run: FirstRun) -> None:
    assert rig.up("lab-ct1", wait=True, wait_timeout_s=1.0) == {"lab-ct1": "failed"}
    error = result(rig).pair("lab-ct1").error or ""
    assert error.startswith(f"busy: up by pid {first_run.pid}") and "waited 1 s" in error


def test_ctrl_c_while_waiting_stops_the_pair_before_its_first_step(
    rig: Rig, first_run: FirstRun
) -> None:
    stop = threading.Event()
    threading.Timer(1.5, stop.set).start()
    assert rig.up("lab-ct1", wait=True, stop=stop) == {"lab-ct1": "interrupted"}
    assert result(rig).pair("lab-ct1").line() == (
        "lab-dflash@lab.lab-ct1: interrupted before its first step"
    )
    assert rig.ran("lab-ct1") == []
    assert first_run.finish() == "done"


def test_a_lock_let_go_names_nobody(tmp_path: Path) -> None:
    folder = tmp_path / "pair"
    assert holder_now(folder) is None and not folder.exists()  # a look writes nothing
    with take_lock(folder) as held:
        assert held.taken_over is None
        who = holder_now(folder) or ""
        assert who.startswith(f"up by pid {os.getpid()} since ")
        assert who.endswith(f"(on {socket.gethostname()})")
        with pytest.raises(PairBusy, match=r"^busy: up by pid"):
            take_lock(folder)  # flock: a second open file conflicts also in one process
    assert (folder / LOCK_FILE).read_text() == ""
    assert holder_now(folder) is None
    with take_lock(folder) as held:
        assert held.stale_warning() is None


def test_the_lock_of_a_killed_run_is_taken_over_with_a_warning_and_the_rerun_converges(
    rig: Rig, first_run: FirstRun
) -> None:
    dead = first_run.pid
    first_run.kill()  # kill -9 in launch: no cleanup ran, the kernel released the flock
    with pytest.raises(ProcessLookupError):
        os.kill(dead, 0)
    assert rig.up("lab-ct1") == {"lab-ct1": "done"}
    warnings = result(rig).pair("lab-ct1").warnings
    assert any(f"pid {dead}" in w and "not running" in w for w in warnings), warnings
    assert rig.ran("lab-ct1") == AFTER_LAUNCH  # launch did not finish in the killed run
    assert rig.up("lab-ct1") == {"lab-ct1": "unchanged"}
    assert result(rig).pair("lab-ct1").warnings == []
