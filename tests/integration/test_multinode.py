"""One model across two lab containers (issue 24): real sshd hosts on their own addresses, real
vLLM CPU on its native multi-node launcher (tensor-parallel 2: ``--nnodes 2``, the second
member ``--headless``), the lab target with its DFlash drafter, through ``launch`` / ``bench`` /
``status`` / ``stop`` as an operator runs them, with the shipped ``playbooks/lab-multinode.yaml``.

An isolated lab (its own bridge and PVE double) with the lab inventory's ``lab-ct1`` (head) and
``lab-ct2``, made through the double and nothing else prepared in them (launch writes the
members' names into ``/etc/hosts``; each has its own ``/dev/shm``). One vLLM group at a time
under the machine-wide slot. The test: a launch whose worker is killed while the group starts
fails naming it and leaves nothing running; the rerun converges: every rank joins → a chat
completion, and a second identical launch changes nothing; ``bench`` on the head counts the
drafts; the worker killed → the group's status names it and requests fail; ``stop`` on the head
cleans both.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dflashops.bench.entry import run_bench
from dflashops.bench.request import BenchRequest, SettingsRequest
from dflashops.deployment.managed import confirm_managed
from dflashops.deployment.manifest import read_manifest
from dflashops.doctor.members import gather_placement
from dflashops.launch.control import stop_server
from dflashops.launch.core import launch
from dflashops.launch.group import PlacementLaunchReport, placement_status, read_placement
from dflashops.launch.member_hosts import BEGIN, END
from dflashops.launch.report import LaunchFailed
from dflashops.launch.status import server_status
from dflashops.playbook.load import load_playbook
from dflashops.proxmox.client import PveClient
from tests.support.lab import require_lab
from tests.support.multinode_lab import LAB_MEMBERS, MultiLab, multinode_lab
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = pytest.mark.root

CIDR = "10.200.24.0/24"  # issue 24
HEAD, WORKER = LAB_MEMBERS
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "lab-multinode.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiLab]:
    require_lab()
    runtime_or_skip()  # the lab mounts the runtime (venv, base Python, models) in the containers
    workdir = tmp_path_factory.mktemp("multinode")
    with multinode_lab(workdir, tag="n", cidr=CIDR) as lab:
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
    book = load_playbook(PLAYBOOK)
    assert book.placement is not None and book.placement.members == [HEAD, WORKER]
    # the worker's PVE firewall is on (on node lab2), the head's off: launch allows the members
    # on the worker only (the rules themselves: tests/unit/test_pve_firewall.py)
    worker_ct = confirm_managed(lab.inventory, WORKER)
    assert worker_ct.node is not None and worker_ct.vmid is not None
    pve = PveClient.for_cluster(lab.inventory, lab.inventory.container(WORKER).cluster)
    pve.put(pve.ct_path(worker_ct.node, worker_ct.vmid, "firewall", "options"), enable=1)

    # the worker dies while the group starts: the launch fails naming it, nothing is left running
    killer = kill_when_started(lab, WORKER)
    with pytest.raises(LaunchFailed, match=rf"member {WORKER} \(worker, rank 1, [0-9.]+\) exited"):
        launch(lab.inventory, HEAD, book, timeout_s=400)
    killer.join(timeout=5)
    assert server_pid(lab, HEAD) is None and server_pid(lab, WORKER) is None
    # the members' names resolve in each container: launch wrote one block, other lines kept
    wanted = [BEGIN, *(f"{lab.addresses[n]} {n}" for n in (HEAD, WORKER)), END]
    for name in (HEAD, WORKER):
        with lab.conn(name) as conn:
            lines = conn.run("cat /etc/hosts", deadline=20).stdout.splitlines()
            resolved = conn.run(f"getent hosts {WORKER}", deadline=20).stdout.split()
        start = lines.index(BEGIN)
        assert lines[start : start + 4] == wanted and lines.count(BEGIN) == 1
        assert any("localhost" in line for line in lines[:start])
        assert resolved[0] == lab.addresses[WORKER]

    # the rerun converges: every rank joins and the head serves
    seen: list[str] = []
    report = launch(lab.inventory, HEAD, book, progress=seen.append, timeout_s=400)
    endpoint = lab.endpoint(HEAD)
    assert report.action == "started" and report.endpoint == endpoint
    dumped = report.model_dump()
    members = {m["name"]: m for m in dumped["members"]}
    assert members[HEAD]["role"] == "head" and members[WORKER]["role"] == "worker"
    assert all(m["joined_in_s"] is not None for m in members.values())
    assert report.phases["joined"] <= report.phases["ready"]
    assert isinstance(report, PlacementLaunchReport)
    assert report.model_copies.startswith("same files on all 2 members: ")
    assert report.firewall[0].startswith(f"{HEAD}: PVE firewall off: nothing to allow")
    # the failed launch above wrote the worker's rule already: this one finds it in place
    assert report.firewall[1].startswith(f"{WORKER}: PVE firewall on: members allowed")
    fw_rules = pve.get(pve.ct_path(worker_ct.node, worker_ct.vmid, "firewall", "rules"))
    assert [(r["source"], r["dport"]) for r in fw_rules] == [(lab.addresses[HEAD], "1024:65535")]
    assert any(f"{WORKER}: ranks [1] of 2 joined" in line for line in seen)
    assert not any("/etc/hosts" in line for line in seen)  # written once, by the first launch
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
    # doctor's link check: 64 MiB from the head to the worker, across the two nodes' bridge
    with lab.conn(HEAD) as conn:
        placement_facts = gather_placement(lab.inventory, HEAD, conn, record)
    (link,) = placement_facts.links
    assert link.error is None and link.nbytes == 64 << 20, link.line()
    assert link.gbit_s is not None and link.gbit_s > 0.1
    # launching it again changes nothing on any member
    same = launch(lab.inventory, HEAD, book, timeout_s=400)
    assert same.action == "unchanged" and same.pid == report.pid
    # every member's manifest is the one launch core's: what its own preflight added, and the
    # drafter judgement (clean: nothing forced)
    for name in (HEAD, WORKER):
        with lab.conn(name) as conn:
            manifest = read_manifest(conn)
            preflight = json.loads(conn.run("cat /var/lib/dflashops/preflight.json").stdout)
        assert manifest is not None and manifest.container == name
        assert manifest.exec_env == preflight.get("exec_env", {})
        assert manifest.nccl_p2p_disable == bool(preflight.get("nccl_p2p_disable"))
        assert manifest.drafter_validation == "clean" and not manifest.forced

    # bench on the head, as `dflashops bench lab-ct1 -p lab-multinode`: the drafter drafts
    bench = run_bench(
        BenchRequest(
            container=HEAD,
            playbook=str(PLAYBOOK),
            settings=SettingsRequest(concurrency=(1,), requests=3, max_tokens=32),
        ),
        lambda: lab.inventory,
    )
    level = bench.levels[0]
    assert level.completed == 3
    assert level.spec_decode_num_drafts and level.spec_decode_draft_tokens
    assert level.spec_decode_accepted_tokens is not None
    assert level.spec_decode_draft_tokens == 4 * level.spec_decode_num_drafts  # k = 4

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
