"""A placement whose worker cannot be reached: ``stop`` stops the reachable members for real,
names the unreachable one and fails (exit 1); ``status`` calls the group degraded, naming it;
doctor's cross-node facts read the head for real and name the worker.

The head is a real deployment behind a real sshd on loopback: the files ``render_member``
renders for rank 0 (supervisor, launch script, ``placement.json``) in a temp layout, with a stub
"python" standing in for vLLM (it serves until killed, with a child like an engine worker), run
by the rendered fallback supervisor. The worker's SSH port refuses: nothing listens there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dflashops.deployment.layout import Layout
from dflashops.deployment.manifest import DeployedFile, DeployedManifest
from dflashops.doctor.members import gather_placement
from dflashops.errors import ServerError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab.host_model import SshHost
from dflashops.launch import lifecycle
from dflashops.launch.control import stop_server
from dflashops.launch.group import read_placement, stop_placement
from dflashops.launch.members import render_member
from dflashops.launch.placement import resolve_members
from dflashops.launch.render import RenderInputs
from dflashops.launch.status import group_health, placement_status
from dflashops.playbook.models import Playbook
from tests.support.inventories import closed_port
from tests.support.ssh_hosts import connect_to

pytest_plugins = ["tests.support.ssh_hosts"]

STUB = """#!/bin/sh
sleep 300 &
echo $! > "{child}"
wait
"""


def inventory_for(host: SshHost, tmp_path: Path) -> Inventory:
    """Head: the loopback sshd. Worker: a port nothing listens on (refused at once)."""
    ssh = f"user: {host.user}, key_file: {host.key_file}, known_hosts: {host.known_hosts}"
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "version: 1\n"
        "clusters:\n"
        "  lab:\n"
        "    api_url: https://127.0.0.1:8006\n"
        "    auth: {user: root@pam, password: {env: UNUSED_PVE_PASSWORD}}\n"
        "    nodes: {lab: {}}\n"
        "containers:\n"
        f"  ct-head: {{vmid: 901, network: {{ip: 127.0.0.1/8}}, ssh: {{host: 127.0.0.1, "
        f"port: {host.port}, {ssh}}}}}\n"
        f"  ct-worker: {{vmid: 902, network: {{ip: 127.0.0.2/8}}, ssh: {{host: 127.0.0.1, "
        f"port: {closed_port()}, {ssh}}}}}\n"
    )
    # these SSH hosts are not PVE containers: what is tested is the group's stop
    return load_inventory(path).without_pve_check()


PLAYBOOK = Playbook.model_validate(
    {
        "name": "split",
        "model": {"path": "/models/m", "served_name": "m"},
        "engine": {"name": "vllm", "version": "0.32.0"},
        "server": {"device": "cpu", "port": 30000},
        "placement": {"members": ["ct-head", "ct-worker"], "tensor_parallel_size": 2},
    }
)


class Head:
    """The head's rendered deployment in a temp folder, reached over the loopback sshd."""

    def __init__(self, root: Path, inventory: Inventory) -> None:
        base = root / "dflashops-head"  # the name lets the scripts recognise our processes
        self.layout = Layout(
            etc=str(base / "etc"), state=str(base / "state"), log_dir=str(base / "log")
        )
        self.child = base / "child.pid"
        stub = base / "venv" / "bin" / "python"
        stub.parent.mkdir(parents=True)
        stub.write_text(STUB.format(child=self.child))
        stub.chmod(0o755)
        members = resolve_members(inventory, PLAYBOOK)
        inputs = RenderInputs(supervisor="fallback", venv_python=str(stub), layout=self.layout)
        rendered = render_member(PLAYBOOK, members, members[0], inputs).rendered
        for f in rendered.files:
            Path(f.path).parent.mkdir(parents=True, exist_ok=True)
            Path(f.path).write_bytes(f.content)
            Path(f.path).chmod(f.mode)
        manifest = DeployedManifest(
            playbook=PLAYBOOK.name,
            container="ct-head",
            engine="vllm",
            engine_version="0.32.0",
            dflashops_version="0",
            dflashops_wheel_sha256="0" * 64,
            supervisor="fallback",
            files=[DeployedFile(path=f.path, sha256=f.sha256, mode=f.mode) for f in rendered.files],
            spec=rendered.spec.to_dict(),
            speculative_config=None,
            method="none",
            num_speculative_tokens=None,
            served_model_name="m",
            host="127.0.0.1",
            port=30000,
            endpoint="http://127.0.0.1:30000/v1",
            pid=None,
            deployed_at=datetime.now(UTC),
            started_at=None,
        )
        Path(self.layout.manifest).write_bytes(manifest.to_bytes())


@pytest.fixture
def deployed(loopback_host: SshHost, tmp_path: Path) -> Iterator[tuple[Inventory, Head]]:
    inventory = inventory_for(loopback_host, tmp_path)
    head = Head(tmp_path, inventory)
    with connect_to(loopback_host) as conn:
        before = lifecycle.run_state(conn, head.layout)
        lifecycle.start(conn, before, systemd=False, layout=head.layout)
    try:
        yield inventory, head
    finally:
        with connect_to(loopback_host) as conn:  # never leave a supervisor behind
            lifecycle.stop(conn, systemd=False, layout=head.layout)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def _wait_child(head: Head) -> int:
    deadline = time.monotonic() + 20
    while not head.child.exists() or not head.child.read_text().strip():
        assert time.monotonic() < deadline, "the stub server did not start"
        time.sleep(0.1)
    return int(head.child.read_text())


def test_stop_stops_the_reachable_head_and_names_the_unreachable_worker(
    deployed: tuple[Inventory, Head], loopback_host: SshHost
) -> None:
    inventory, head = deployed
    child = _wait_child(head)
    with connect_to(loopback_host) as conn:
        record = read_placement(conn, head.layout)
        server_pid = lifecycle.run_state(conn, head.layout).server_pid
    assert record is not None and [m["name"] for m in record["members"]] == [
        "ct-head",
        "ct-worker",
    ]
    assert server_pid is not None and _alive(server_pid)

    started = time.monotonic()
    with pytest.raises(ServerError) as failed:
        stop_server(inventory, "ct-head", layout=head.layout)
    took = time.monotonic() - started
    message = failed.value.one_line()
    assert message.startswith("stopped the reachable members; not stopped: ct-worker: ")
    assert "ct-head" not in message.split("not stopped:", 1)[1]
    # the head really stopped, its engine-like child too
    assert not _alive(server_pid) and not _alive(child)
    assert took < 30, f"a refusing member held stop for {took:.0f}s"

    # run again on the already stopped group: the report says who was reached, who not
    report = stop_placement(inventory, record, container="ct-head", layout=head.layout)
    by_name = {m.name: m for m in report.members}
    assert by_name["ct-head"].error is None and by_name["ct-head"].was_running is False
    assert by_name["ct-worker"].was_running is None and by_name["ct-worker"].error
    assert not report.complete


def test_status_and_doctor_name_the_unreachable_worker(
    deployed: tuple[Inventory, Head], loopback_host: SshHost
) -> None:
    inventory, head = deployed
    _wait_child(head)
    with connect_to(loopback_host) as conn:
        record = read_placement(conn, head.layout)
        assert record is not None
        facts = gather_placement(inventory, "ct-head", conn, record, layout=head.layout)
    rows = {r.name: r for r in placement_status(inventory, record, layout=head.layout)}
    assert rows["ct-head"].running is True and rows["ct-head"].pid is not None
    assert rows["ct-worker"].running is None and rows["ct-worker"].error
    health, problem = group_health(list(rows.values()))
    assert health == "degraded"
    assert problem is not None
    assert problem.startswith("ct-worker (worker, rank 1, 127.0.0.2) unreachable: ")

    mine, worker = facts.members
    # the head, read for real: its server runs with the member's environment, and the
    # address the others reach it at is on one of its interfaces (loopback here)
    assert mine.reachable and mine.running
    assert mine.env.get("VLLM_HOST_IP") == "127.0.0.1"
    assert mine.interface_of("127.0.0.1") == "lo"
    assert not worker.reachable and worker.error and not worker.running
    assert facts.links == ()  # a link is measured to a member doctor reached only
