"""One model across two lab containers (issue 24): real sshd hosts on their own addresses, real
vLLM CPU on its native multi-node launcher (tensor-parallel 2: ``--nnodes 2``, the second
member ``--headless``), through ``launch`` / ``status`` / ``stop`` as an operator runs them.

An isolated lab (its own bridge and PVE double) with two containers, ``mct1`` (head) and
``mct2``. One vLLM group at a time under the machine-wide slot. The test: a launch whose worker
is killed while the group starts fails naming it and leaves nothing running; launch → every
rank joins → a chat completion; the worker killed → the group's status names it and requests
fail; ``stop`` on the head cleans both; a rerun converges (serves again), a second identical
launch changes nothing, and the group stops.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from dflashops.launch.control import stop_server
from dflashops.launch.core import launch
from dflashops.launch.group import placement_status, read_placement
from dflashops.launch.report import LaunchFailed
from dflashops.launch.status import server_status
from tests.support.lab import require_lab
from tests.support.multinode_lab import MultiLab, lab_playbook, multinode_lab
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = pytest.mark.root

CIDR = "10.200.24.0/24"  # issue 24
HEAD, WORKER = "mct1", "mct2"
CONTAINERS = {HEAD: (981, "10.200.24.30"), WORKER: (982, "10.200.24.31")}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiLab]:
    require_lab()
    runtime_or_skip()  # the lab mounts the runtime (venv, base Python, models) in the containers
    workdir = tmp_path_factory.mktemp("multinode")
    with multinode_lab(workdir, tag="n", cidr=CIDR, containers=CONTAINERS) as lab:
        yield lab


@pytest.fixture(scope="module")
def vllm_slot(lab: MultiLab) -> Iterator[None]:
    slot = VllmSlot()
    slot.acquire()
    try:
        yield
    finally:
        try:
            stop_server(lab.inventory, HEAD)
        finally:
            slot.release()


def chat(endpoint: str) -> dict[str, Any]:
    response = httpx.post(
        f"{endpoint}/chat/completions",
        json={
            "model": "tiny",
            "messages": [{"role": "user", "content": "hello"}],
            "max_tokens": 16,
            "temperature": 0,
        },
        timeout=120,
    )
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def server_pid(lab: MultiLab, name: str) -> int | None:
    with lab.conn(name) as conn:
        return server_status(conn).pid


def kill_when_started(lab: MultiLab, name: str, within_s: float = 120) -> threading.Thread:
    """Kill ``name``'s whole server process group as soon as its server runs (in a thread)."""

    def kill() -> None:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            pid = server_pid(lab, name)
            if pid is not None:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
                return
            time.sleep(0.5)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_one_model_across_two_containers(lab: MultiLab, vllm_slot: None) -> None:
    book = lab_playbook(HEAD, {"members": [HEAD, WORKER], "tensor_parallel_size": 2})

    # the worker dies while the group starts: the launch fails naming it, nothing is left running
    killer = kill_when_started(lab, WORKER)
    with pytest.raises(LaunchFailed, match=rf"member {WORKER} \(worker, rank 1, [0-9.]+\) exited"):
        launch(lab.inventory, HEAD, book, timeout_s=400)
    killer.join(timeout=5)
    assert server_pid(lab, HEAD) is None and server_pid(lab, WORKER) is None

    seen: list[str] = []
    report = launch(lab.inventory, HEAD, book, progress=seen.append, timeout_s=400)
    endpoint = lab.endpoint(HEAD)
    assert report.action == "started" and report.endpoint == endpoint
    dumped = report.model_dump()
    members = {m["name"]: m for m in dumped["members"]}
    assert members[HEAD]["role"] == "head" and members[WORKER]["role"] == "worker"
    assert all(m["joined_in_s"] is not None for m in members.values())
    assert report.phases["joined"] <= report.phases["ready"]
    assert any(f"{WORKER}: ranks [1] of 2 joined" in line for line in seen)
    answer = chat(endpoint)
    assert answer["choices"][0]["message"]["content"]
    # the worker really runs rank 1 of the tensor-parallel group, in its own container
    with lab.conn(WORKER) as conn:
        log = conn.run("cat /var/log/dflashops/server.log", deadline=30).stdout
        record = read_placement(conn)
    assert "rank 1 in world size 2 is assigned as" in log and "TP rank 1" in log
    assert record is not None and record["role"] == "worker"
    rows = {r.name: r for r in placement_status(lab.inventory, record)}
    assert rows[HEAD].running and rows[HEAD].listening and rows[WORKER].running

    # the worker dies: the group's status names it, and the head no longer answers
    worker_pid = server_pid(lab, WORKER)
    assert worker_pid is not None
    # the member's whole process group (supervisor, engine, its rank's worker), as a crashed
    # container loses it; a lab container shares this machine's pid space
    os.killpg(os.getpgid(worker_pid), signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = {r.name: r for r in placement_status(lab.inventory, record)}
        if not rows[WORKER].running:
            break
        time.sleep(1)
    assert not rows[WORKER].running and rows[WORKER].error is None
    with pytest.raises(httpx.HTTPError):
        chat(endpoint)

    # stop on the head cleans every member (the head is still up, the worker is gone)
    stopped = stop_server(lab.inventory, HEAD)
    assert stopped.container == HEAD
    assert server_pid(lab, HEAD) is None and server_pid(lab, WORKER) is None
    rows = {r.name: r for r in placement_status(lab.inventory, record)}
    assert not rows[HEAD].running and not rows[WORKER].running

    # a rerun converges: the group serves again
    again = launch(lab.inventory, HEAD, book, timeout_s=400)
    assert again.action == "started"
    assert chat(endpoint)["choices"][0]["message"]["content"]
    # and launching it again changes nothing on any member
    same = launch(lab.inventory, HEAD, book, timeout_s=400)
    assert same.action == "unchanged" and same.pid == again.pid
