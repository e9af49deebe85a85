"""An operator's bad day (issue 32): every fault, the end state it must leave, and its test.

:data:`FAULTS` lists them all (each test also asserts that a plain rerun of the command then
converges); the ones made here share one isolated lab with one container running the fake
engine (:mod:`tests.support.fake_engine`): real sshd, real processes killed by pid, a real
SIGINT, real truncated files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.lab.mounts import venv_base_prefix
from dflashops.launch.status import server_status
from tests.support.fake_engine import fake_playbook, install_fake_engine
from tests.support.lab import require_lab, run_cli
from tests.support.launch_lab import Lab, containers_lab
from tests.support.vllm_servers import runtime_or_skip

pytestmark = pytest.mark.root

CT = "lct321"
CIDR = "10.200.32.0/24"  # issue 32
MANIFEST = DEFAULT_LAYOUT.manifest
HERE = "tests/integration/test_faults.py"

# (fault, the end state it leaves, the test that makes it happen)
FAULTS = (
    (
        "kill -9 of the server: its engine children live on",
        "status and doctor name the strays; launch ends them and keeps the running server; "
        "stop ends every process group a server was started in",
        f"{HERE}::test_a_killed_server_leaves_strays_that_launch_and_stop_end",
    ),
    (
        "the server dies during bench",
        "the finished levels kept, the one in progress marked incomplete with its failed "
        "requests, written to --out; exit 1 saying the server stopped answering",
        "tests/integration/test_bench_server_death.py",
    ),
    (
        "the server up launched is dead",
        "up launches it again instead of 'nothing to do'",
        "tests/unit/test_up_faults.py",
    ),
    (
        "two up runs on one pair",
        "the second says 'busy: up by pid N since T' (or waits with --wait); a dead "
        "holder's lock is taken over with a warning",
        "tests/unit/test_up_faults.py",
    ),
    (
        "two commands that change one container",
        "the second says 'busy: COMMAND by pid N since T on HOST' (or waits with --wait)",
        f"{HERE}::test_two_commands_on_one_container_wait_or_say_who_holds_it",
    ),
    (
        "Ctrl-C during launch",
        "rolled back as a failed start: the previous files and server back, deployed.json "
        "names what runs",
        f"{HERE}::test_ctrl_c_during_launch_rolls_back_and_the_rerun_converges",
    ),
    (
        "a truncated deployed.json",
        "launch refuses naming the way out; launch --force rebuilds it (the broken one "
        "kept); stop works without it",
        f"{HERE}::test_a_truncated_manifest_is_rebuilt_by_launch_force_and_stop_works_without_it",
    ),
    (
        "a corrupt up run record",
        "that pair fails with exit 2 (one JSON document with --json); the others run",
        "tests/unit/test_up_faults.py",
    ),
    (
        "a full disk",
        "'the filesystem ... is full (free, needed)'; nothing changed",
        "tests/integration/test_remote_disk_full.py",
    ),
    (
        "the PVE API down or hung",
        "one line with the cause, within the inventory's timeout_s",
        "tests/unit/test_pve_api_down.py",
    ),
)


def test_every_fault_names_a_test_that_exists() -> None:
    root = Path(__file__).resolve().parents[2]
    for _fault, _end, where in FAULTS:
        path, _, name = where.partition("::")
        text = (root / path).read_text(encoding="utf-8")
        assert not name or f"def {name}(" in text, where


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_lab()
    runtime = runtime_or_skip()  # the lab mounts the runtime's base Python
    base = venv_base_prefix(runtime.venv)
    assert base is not None
    workdir = tmp_path_factory.mktemp("faults")
    with containers_lab(workdir, tag="f", cidr=CIDR, containers={CT: (321, "10.200.32.31")}) as lab:
        with lab.conn(CT) as conn:
            install_fake_engine(conn, f"{base}/bin/python3")
        yield lab


GATE = "/srv/probe-gate"  # the fake engine answers completions only while this file exists
# `python -m dflashops.cli` with Ctrl-C raising KeyboardInterrupt whatever was inherited: a suite
# started in the background (`nohup … &` from a script) hands its children SIGINT ignored, and
# then launch never sees the test's Ctrl-C (it failed so in 3 background runs, never otherwise)
INTERRUPTIBLE_CLI = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('dflashops.cli', run_name='__main__', alter_sys=True)"
)


def cli(lab: Lab, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return run_cli(lab.env, *args, check=check, timeout=240)


def book(lab: Lab, name: str, **env: str) -> str:
    return str(fake_playbook(lab.workdir / f"{name}.yaml", CT, **env))


def remote(lab: Lab, command: str) -> str:
    with lab.conn(CT) as conn:
        return conn.run(command, ok_codes=None, deadline=60).stdout


def manifest(lab: Lab) -> dict[str, object]:
    data = json.loads(remote(lab, f"cat {MANIFEST}"))
    assert isinstance(data, dict)
    return data


def alive(lab: Lab, pid: int) -> bool:
    """Running (a zombie is dead: here its new parent may be a pid 1 that never reaps)."""
    state = remote(lab, f"sed 's/.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f1").strip()
    return state not in ("", "Z")


def serving_matches_manifest(lab: Lab) -> None:
    """``deployed.json`` names the process that runs, and the spec it runs is the one it lists."""
    with lab.conn(CT) as conn:
        status = server_status(conn)
    deployed = manifest(lab)
    assert status.running and deployed["pid"] == status.pid
    spec_sha = remote(lab, f"sha256sum < {DEFAULT_LAYOUT.spec}").split()[0]
    files = deployed["files"]
    assert isinstance(files, list)
    assert {f["path"]: f["sha256"] for f in files}[DEFAULT_LAYOUT.spec] == spec_sha


def test_a_killed_server_leaves_strays_that_launch_and_stop_end(lab: Lab) -> None:
    path = book(lab, "strays", FAKE_CHILD="1", FAKE_HEALTH_AFTER="0", FAKE_PROBE_AFTER="0")
    assert cli(lab, "launch", CT, "-p", path).returncode == 0
    with lab.conn(CT) as conn:
        first = server_status(conn)
    assert first.pid is not None and first.strays == []
    child = int(remote(lab, f"cat /proc/{first.pid}/task/{first.pid}/children").split()[0])
    # the server is killed as the OOM killer would: its engine child lives on, re-parented
    os.kill(first.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the supervisor starts a new server beside it
        with lab.conn(CT) as conn:
            now = server_status(conn)
        if now.running and now.pid != first.pid and now.listening:
            break
        time.sleep(1)
    assert now.running and now.pid is not None and now.pid != first.pid
    assert [s.pid for s in now.strays] == [child] and alive(lab, child)
    shown = json.loads(cli(lab, "status", CT, "--json").stdout)[0]["server"]["strays"]
    assert [s["pid"] for s in shown] == [child]
    doctor = json.loads(cli(lab, "doctor", CT, "-p", path, "--json").stdout)
    strays = [f for f in doctor["findings"] if f["rule"] == "strays"]
    assert strays and strays[0]["details"]["pids"] == [child]

    relaunch = json.loads(cli(lab, "launch", CT, "-p", path, "--json").stdout)
    assert relaunch["action"] == "unchanged" and relaunch["pid"] == now.pid
    assert len(relaunch["strays"]) == 1 and f"pid {child} " in relaunch["strays"][0]
    assert not alive(lab, child) and alive(lab, now.pid)
    with lab.conn(CT) as conn:
        assert server_status(conn).strays == []

    # stop ends the server, its child and every group a server was started in
    os.kill(now.pid, signal.SIGKILL)  # once more, and stop right away: nothing may be left
    stopped = json.loads(cli(lab, "stop", CT, "--json").stdout)
    assert stopped["container"] == CT
    # ([E]: the grep's own command line must not match itself)
    left = remote(lab, "grep -l 'fake vllm [E]ngineCore' /proc/[0-9]*/cmdline 2>/dev/null")
    running = [f for f in left.split() if alive(lab, int(f.split("/")[2]))]
    assert running == [], running
    # the plain rerun converges
    assert json.loads(cli(lab, "launch", CT, "-p", path, "--json").stdout)["action"] == "started"
    serving_matches_manifest(lab)


def test_ctrl_c_during_launch_rolls_back_and_the_rerun_converges(lab: Lab) -> None:
    before_path = book(lab, "before", FAKE_HEALTH_AFTER="0", FAKE_PROBE_AFTER="0")
    assert cli(lab, "launch", CT, "-p", before_path).returncode == 0
    before = manifest(lab)
    # the new server answers completions only once the test opens its gate: Ctrl-C comes while
    # launch waits, however slowly this machine runs
    remote(lab, f"rm -f {GATE}")
    after_path = book(
        lab, "after", FAKE_HEALTH_AFTER="2", FAKE_PROBE_AFTER="0", FAKE_PROBE_GATE=GATE
    )
    process = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE_CLI, "launch", CT, "-p", after_path],
        env=lab.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        err = interrupt_when_started(lab, process, before["pid"])
    finally:
        if process.poll() is None:  # a failed check must not leave launch holding the lock
            process.kill()
            process.communicate()
    assert process.returncode == 1, err
    assert "interrupted (Ctrl-C)" in err
    assert "rolled back; the previous server serves again" in err
    serving_matches_manifest(lab)
    assert GATE not in remote(lab, f"cat {DEFAULT_LAYOUT.spec}")  # the previous spec is back
    remote(lab, f"touch {GATE}")
    # the plain rerun converges: the new server, then nothing to do
    again = json.loads(cli(lab, "launch", CT, "-p", after_path, "--json").stdout)
    assert again["action"] == "restarted"
    serving_matches_manifest(lab)
    same = json.loads(cli(lab, "launch", CT, "-p", after_path, "--json").stdout)
    assert same["action"] == "unchanged"


def interrupt_when_started(lab: Lab, process: subprocess.Popen[str], before_pid: object) -> str:
    """Ctrl-C to ``process`` once the new server runs (its spec names the gate); its stderr."""
    deadline = time.monotonic() + 120
    started = False
    while time.monotonic() < deadline and not started:  # until the new server runs
        time.sleep(1)
        with lab.conn(CT) as conn:
            now = server_status(conn)
        spec = remote(lab, f"cat {DEFAULT_LAYOUT.spec}")
        started = now.running and now.pid != before_pid and GATE in spec
    assert started, "the new server never started"
    time.sleep(2)
    assert process.poll() is None, "launch ended before Ctrl-C: " + process.communicate()[1]
    process.send_signal(signal.SIGINT)
    return process.communicate(timeout=180)[1]


def test_a_truncated_manifest_is_rebuilt_by_launch_force_and_stop_works_without_it(
    lab: Lab,
) -> None:
    path = book(lab, "truncated", FAKE_HEALTH_AFTER="0", FAKE_PROBE_AFTER="0")
    assert cli(lab, "launch", CT, "-p", path).returncode == 0
    running = manifest(lab)["pid"]
    remote(lab, f"truncate -s 40 {MANIFEST}")

    refused = cli(lab, "launch", CT, "-p", path)
    assert refused.returncode == 1
    assert "deployed.json: not a dflashops manifest" in refused.stderr
    assert f"dflashops launch {CT} --force` rebuilds it" in refused.stderr
    rebuilt = cli(lab, "launch", CT, "-p", path, "--force", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    report = json.loads(rebuilt.stdout)
    assert report["action"] == "unchanged" and report["pid"] == running  # nothing restarted
    serving_matches_manifest(lab)
    kept = remote(lab, f"ls {MANIFEST}.*.broken").split()
    assert len(kept) == 1 and remote(lab, f"wc -c < {kept[0]}").strip() == "40"
    assert json.loads(cli(lab, "launch", CT, "-p", path, "--json").stdout)["action"] == (
        "unchanged"
    )

    # stop needs only the pid files and the process groups
    remote(lab, f"truncate -s 40 {MANIFEST}")
    stopped = cli(lab, "stop", CT)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the server in {CT}" in stopped.stdout
    assert f"`dflashops launch {CT} --force` rebuilds it" in stopped.stderr
    with lab.conn(CT) as conn:
        assert not server_status(conn).running
    started = json.loads(cli(lab, "launch", CT, "-p", path, "--force", "--json").stdout)
    assert started["action"] == "started"
    serving_matches_manifest(lab)


def holder(lab: Lab) -> str:
    return remote(lab, f"cat {DEFAULT_LAYOUT.state}/lock.holder 2>/dev/null").strip()


def test_two_commands_on_one_container_wait_or_say_who_holds_it(lab: Lab) -> None:
    fast = book(lab, "fast", FAKE_HEALTH_AFTER="0", FAKE_PROBE_AFTER="0")
    assert cli(lab, "launch", CT, "-p", fast).returncode == 0
    # a launch whose server needs 12 s to answer holds the container meanwhile
    slow = book(lab, "slow", FAKE_HEALTH_AFTER="0", FAKE_PROBE_AFTER="12")
    first = subprocess.Popen(
        [sys.executable, "-m", "dflashops.cli", "launch", CT, "-p", slow],
        env=lab.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not holder(lab):
        time.sleep(0.5)
    assert holder(lab).startswith(f"launch\t{first.pid}\t")
    busy = cli(lab, "stop", CT)
    assert busy.returncode == 1
    assert f"{CT} is busy: launch by pid {first.pid} since " in busy.stderr
    assert "--wait" in busy.stderr
    queued = cli(lab, "stop", CT, "--wait")  # waits for the launch, then stops its server
    assert first.wait(timeout=120) == 0, first.communicate()[1]
    assert queued.returncode == 0, queued.stderr
    assert f"waiting for {CT}: launch by pid {first.pid}" in queued.stderr
    with lab.conn(CT) as conn:
        assert not server_status(conn).running
    assert holder(lab) == ""  # released with the command

    # a holder of this machine whose process is gone (its link cut: sshd has not noticed)
    dead = 2**22 + 12345  # above pid_max's default: no such process here
    info = f"launch\\t{dead}\\t{os.uname().nodename}\\t2026-12-04T00:00:00Z"
    lock, record = f"{DEFAULT_LAYOUT.state}/lock", f"{DEFAULT_LAYOUT.state}/lock.holder"
    remote(
        lab,
        f'setsid sh -c \'exec 9>>{lock}; flock 9; printf "{info}\\t%s\\n" $$ > {record}; '
        "exec sleep 600' </dev/null >/dev/null 2>&1 &",
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and str(dead) not in holder(lab):
        time.sleep(0.2)
    assert str(dead) in holder(lab)
    taken = cli(lab, "launch", CT, "-p", fast)
    assert taken.returncode == 0, taken.stderr
    assert f"the lock of launch by pid {dead} " in taken.stderr and "taken over" in taken.stderr
    serving_matches_manifest(lab)
    again = json.loads(cli(lab, "launch", CT, "-p", fast, "--json").stdout)
    assert again["action"] == "unchanged"
