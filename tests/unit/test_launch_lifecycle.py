"""The fallback supervisor and the lifecycle scripts, run for real on this machine.

The rendered ``supervise.sh`` starts the rendered ``launch.sh``, which execs a stub "python"
standing in for the bundled server and engine (it serves until killed, with a child like an
engine worker, or exits with a chosen code). The scripts ``launch`` sends over SSH
(start, state, watch, stop) run here with ``sh``, against a layout in a temp folder.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.deployment.layout import Layout
from dflashops.launch import lifecycle
from dflashops.launch.render import RenderInputs, RestartPolicy, render
from dflashops.playbook.models import Playbook

# The stub: "serve" runs until killed (with a child process, like vLLM's engine core);
# anything else in the mode file is an exit code.
STUB = """#!/bin/sh
mode=$(cat "{mode}")
echo "stub: mode $mode"
if [ "$mode" = serve ]; then
    sleep 300 &
    echo $! > "{child}"
    wait
fi
sleep 0.2
exit "$mode"
"""
POLICY = RestartPolicy(max_restarts=2, min_delay_s=1, max_delay_s=1, stable_s=300)


def sh(script: str, timeout: float = 30.0) -> str:
    done = subprocess.run(
        ["sh", "-c", script], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


class Box:
    """A rendered deployment in a temp folder."""

    def __init__(self, root: Path) -> None:
        base = root / "dflashops-box"  # the name lets the scripts recognise our processes
        self.layout = Layout(
            etc=str(base / "etc"), state=str(base / "state"), log_dir=str(base / "log")
        )
        self.mode = base / "mode"
        self.child = base / "child.pid"
        stub = base / "venv" / "bin" / "python"
        stub.parent.mkdir(parents=True)
        stub.write_text(STUB.format(mode=self.mode, child=self.child))
        stub.chmod(0o755)
        book = Playbook.model_validate(
            {
                "name": "box",
                "model": {"path": "/models/m"},
                "engine": {"name": "vllm", "version": "0.32.0"},
                "server": {"device": "cpu"},
            }
        )
        rendered = render(
            book,
            RenderInputs(
                supervisor="fallback", venv_python=str(stub), layout=self.layout, restart=POLICY
            ),
        )
        for f in rendered.files:
            Path(f.path).parent.mkdir(parents=True, exist_ok=True)
            Path(f.path).write_bytes(f.content)
            Path(f.path).chmod(f.mode)

    def state(self) -> lifecycle.RunState:
        return lifecycle.parse_state(sh(lifecycle.state_script(self.layout)))

    def events(self) -> list[str]:
        path = Path(self.layout.events)
        return path.read_text().splitlines() if path.exists() else []

    def start(self, mode: str) -> None:
        self.mode.write_text(mode)
        sh(lifecycle.start_script(self.layout, systemd=False))

    def wait_for(self, predicate: object, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():  # type: ignore[operator]
                return
            time.sleep(0.1)
        log = Path(self.layout.log)
        raise AssertionError(f"timed out; events {self.events()}; log {log.read_text()}")

    def stop(self) -> None:
        sh(lifecycle.stop_script(self.layout, systemd=False, disable=False, grace_s=10), 30)


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    made = Box(tmp_path)
    try:
        yield made
    finally:
        made.stop()  # never leave a supervisor behind


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_start_watch_and_stop_the_whole_group(box: Box) -> None:
    box.start("serve")
    box.wait_for(lambda: box.child.exists() and box.state().server_pid is not None)
    state = box.state()
    assert state.running and state.supervisor_pid is not None
    server_pid = state.server_pid
    assert server_pid is not None
    assert box.events()[0].split()[:2] == ["start", str(server_pid)]
    view = lifecycle.parse_watch(sh(lifecycle.watch_script(box.layout, server_pid, 0, 0)))
    assert view.alive and view.exit_code is None and view.log_line == "stub: mode serve"
    child = int(box.child.read_text())
    # a second supervisor is refused while one runs
    refused = subprocess.run(
        ["sh", "-c", lifecycle.start_script(box.layout, systemd=False)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode == 3 and "still running" in refused.stderr

    box.stop()
    assert not box.state().running
    assert not _alive(server_pid) and not _alive(child)  # the worker went with the group
    assert box.events()[-1].startswith("exit ")
    assert not Path(box.layout.supervisor_pidfile).exists()


def test_a_crashing_server_is_restarted_then_given_up(box: Box) -> None:
    box.start("1")
    box.wait_for(lambda: any(e.startswith("gaveup") for e in box.events()))
    kinds = [e.split()[0] for e in box.events()]
    assert kinds == ["start", "exit", "start", "exit", "start", "exit", "gaveup"]
    assert box.state().supervisor_pid is None
    log = Path(box.layout.log).read_text()
    assert "restart 1 of 2 in 1s" in log and "giving up" in log
    view = lifecycle.parse_watch(sh(lifecycle.watch_script(box.layout, 1, 0, 0)))
    assert view.exit_code == 1 and not view.alive


def test_a_preflight_failure_is_not_restarted(box: Box) -> None:
    box.start("13")
    box.wait_for(lambda: box.state().supervisor_pid is None and len(box.events()) == 2)
    time.sleep(1.5)  # longer than the restart delay: nothing else happens
    assert [e.split()[:2] for e in box.events()] == [
        ["start", box.events()[0].split()[1]],
        ["exit", "13"],
    ]
    assert "preflight failed (exit 13); not restarting" in Path(box.layout.log).read_text()


def test_pids_of_other_processes_are_not_ours(box: Box) -> None:
    other = subprocess.Popen(["sleep", "60"])  # alive, in our namespace, not ours
    try:
        Path(box.layout.state).mkdir(parents=True, exist_ok=True)
        Path(box.layout.pidfile).write_text(f"{other.pid}\n")
        Path(box.layout.supervisor_pidfile).write_text("1\n")  # init: never ours
        state = box.state()
        assert state.server_pid is None and state.supervisor_pid is None
        box.stop()  # must not signal either
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


def test_a_process_caught_mid_exec_is_looked_at_twice(tmp_path: Path) -> None:
    """During an exec (launch.sh -> dflashops.server -> the engine) /proc/PID/cmdline reads
    empty for a moment: a watch poll that landed there called a live server dead (CI, twice in
    one run). Measured here against a shell that execs itself in a loop: one look missed 16 of
    400, two looks 1 of 400. Tested deterministically with a scripted first look: an empty
    command line is looked at again, a foreign one is not ours at once."""

    def first_look(code: int, flag: Path) -> str:
        # the first look answers code, every later one "ours"; each look leaves a line in flag
        return (
            f"ours_now() {{ if [ -s {flag} ]; then echo again >> {flag}; return 0; fi; "
            f"echo first > {flag}; return {code}; }}\n"
        )

    empty, foreign = tmp_path / "empty", tmp_path / "foreign"
    assert sh(lifecycle._HELPERS + first_look(2, empty) + "ours 4242 && echo ours") == "ours\n"
    assert empty.read_text() == "first\nagain\n"
    assert sh(lifecycle._HELPERS + first_look(1, foreign) + "ours 4242 || echo not") == "not\n"
    assert foreign.read_text() == "first\n"

    # the real helper: a foreign process, a zombie (empty command line, but Z), a gone pid, and
    # a process whose command line names us in capitals as vLLM's titles do
    named = subprocess.Popen(["sleep", "60"])
    zombie = subprocess.Popen(["true"])
    titled = subprocess.Popen(["sh", "-c", "sleep 60", "VLLM::EngineCore"])
    try:
        time.sleep(0.3)  # true has exited, unreaped
        for pid in (named.pid, zombie.pid, 999999999):
            assert sh(lifecycle._HELPERS + f"ours {pid} || echo not") == "not\n"
        assert sh(lifecycle._HELPERS + f"ours {titled.pid} && echo ours") == "ours\n"
    finally:
        for process in (named, zombie, titled):
            process.kill()
            process.wait()
