"""A server's process tree and the strays an earlier one left: the classification from canned
process lines, and the scripts run for real in a local shell against real processes (an engine
worker's stand-in in a process group a start event recorded)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from dflashops.deployment.layout import Layout
from dflashops.launch import lifecycle
from dflashops.launch.interrupts import deferred_interrupts
from dflashops.launch.processes import Process, parse_processes, strays
from dflashops.remote import CommandResult, SshConnection

STRAY = "import time; time.sleep(120)  # vllm EngineCore stand-in"


def test_strays_are_the_group_s_processes_outside_the_running_tree() -> None:
    lines = "\n".join(
        [
            "proc 100 1 100 1000 /bin/sh /etc/dflashops/supervise.sh",
            "proc 200 100 100 900000 python -m vllm.entrypoints.cli.main serve /m",
            "proc 201 200 100 2000000 VLLM::EngineCore",
            "proc 202 201 100 3000000 VLLM::Worker",
            "proc 150 1 100 2100000 VLLM::EngineCore",  # the killed server's engine
            "proc 151 150 100 3000000 VLLM::Worker",
            "not a process line",
        ]
    )
    found = parse_processes(lines)
    assert [p.pid for p in found] == [100, 200, 201, 202, 150, 151]
    assert [p.pid for p in strays(found, server=200, supervisor=100)] == [150, 151]
    # nothing runs: every process of a recorded group is a stray
    assert [p.pid for p in strays(found, server=None, supervisor=None)] == [
        100,
        200,
        201,
        202,
        150,
        151,
    ]
    assert Process(150, 1, 100, 2_100_000, "VLLM::EngineCore").line() == (
        "pid 150 (2050 MB): VLLM::EngineCore"
    )


class LocalShell:
    """What lifecycle's scripts need of a connection, run by this machine's shell."""

    host = name = "local"

    def run(self, command: str, **_options: Any) -> CommandResult:
        done = subprocess.run(
            ["sh", "-c", command], capture_output=True, text=True, timeout=60, check=False
        )
        return CommandResult("local", "script", done.returncode, done.stdout, done.stderr, 0.0)


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    layout = Layout(etc=str(tmp_path / "etc"), state=str(tmp_path / "state"))
    Path(layout.state).mkdir(parents=True)
    return layout


@pytest.fixture
def stray(layout: Layout) -> Iterator[subprocess.Popen[bytes]]:
    """An engine worker's stand-in in a process group of its own, recorded by a start event
    as a server's group (its server long gone)."""
    process = subprocess.Popen([sys.executable, "-c", STRAY], start_new_session=True)
    Path(layout.events).write_text(f"start 1 1700000000 {process.pid}\n")
    yield process
    process.kill()
    process.wait()


def test_run_state_finds_the_stray_and_end_processes_ends_it(
    layout: Layout, stray: subprocess.Popen[bytes]
) -> None:
    conn = cast(SshConnection, LocalShell())
    state = lifecycle.run_state(conn, layout)
    assert state.server_pid is None and [p.pid for p in state.strays] == [stray.pid]
    assert STRAY[:20] in state.strays[0].command
    lifecycle.end_processes(conn, state.strays)
    assert stray.wait(timeout=30) is not None
    assert lifecycle.run_state(conn, layout).strays == ()


def test_stop_ends_every_recorded_group(layout: Layout, stray: subprocess.Popen[bytes]) -> None:
    conn = cast(SshConnection, LocalShell())
    lifecycle.stop(conn, systemd=False, layout=layout, grace_s=10)
    assert stray.wait(timeout=30) is not None


def test_an_old_start_event_without_a_group_is_no_stray(layout: Layout) -> None:
    Path(layout.events).write_text("start 4242 1700000000\nexit 137 1700000100\n")
    conn = cast(SshConnection, LocalShell())
    assert lifecycle.run_state(conn, layout).strays == ()


def test_an_interrupt_in_a_deferred_block_comes_after_it() -> None:
    import os
    import signal

    said: list[str] = []
    finished = False
    with pytest.raises(KeyboardInterrupt), deferred_interrupts(said.append, "writing the file"):
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert finished and said == ["Ctrl-C: writing the file first"]
