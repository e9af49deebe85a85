"""The lab's cluster has two PVE nodes (issue 24), as a real one does: ``lab`` and ``lab2``, each a
node host of its own (netns, sshd, fake tools, private ``/dev``), one ``/etc/pve`` shared.

An isolated lab (bridge ``dfolabw0``, 10.200.26.0/24): the API lists both nodes; ``provision``
creates the lab inventory's ``lab-ct1`` on ``lab`` and ``lab-ct2`` (with the fake GPUs) on
``lab2`` through the API and SSH to that node, the product unchanged; each container has its
own ``/dev/shm``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dflashops.inventory.load import Inventory, load_inventory
from dflashops.proxmox.apply import ProvisionOptions, provision
from dflashops.proxmox.client import PveClient
from dflashops.remote import SshConnection
from tests.support.lab import isolated_lab_env, require_lab, run_cli

pytestmark = [pytest.mark.root, pytest.mark.timeout(240)]

LabNodes = tuple[Inventory, Path, dict[str, Any]]  # inventory, lab state, `lab up --json`
OPTIONS = ProvisionOptions(
    lock_wait_s=60, task_timeout_s=60, address_timeout_s=30, ssh_timeout_s=30
)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabNodes]:
    require_lab()
    workdir = tmp_path_factory.mktemp("nodes")
    env = isolated_lab_env(workdir, tag="w", cidr="10.200.26.0/24")
    try:
        status = json.loads(run_cli(env, "lab", "up", "--json", timeout=300).stdout)
        yield load_inventory(Path(status["inventory"])), Path(env["DFLASHOPS_LAB_STATE"]), status
    finally:
        run_cli(env, "lab", "down", check=False, timeout=300)


def test_the_cluster_has_two_nodes(lab: LabNodes) -> None:
    inventory, _, status = lab
    assert [n["name"] for n in status["nodes"]] == ["lab", "lab2"]
    assert [n["address"] for n in status["nodes"]] == ["10.200.26.2", "10.200.26.3"]
    client = PveClient(inventory.clusters["lab"], inventory.secret("lab"))
    assert sorted(n["node"] for n in client.get("nodes")) == ["lab", "lab2"]
    resources = client.get("cluster/resources", type="node")
    assert sorted(r["node"] for r in resources) == ["lab", "lab2"]
    # each node host is its own SSH host, named as its PVE node
    for name in ("lab", "lab2"):
        node = inventory.clusters["lab"].nodes[name]
        with SshConnection.from_access(node.ssh, deadline=30) as conn:
            assert conn.run("hostname").stdout.strip() == name
            assert conn.run("pveversion").stdout.startswith("pve-manager/")


def test_provision_places_each_container_on_its_node(lab: LabNodes) -> None:
    inventory, state, _ = lab
    assert inventory.container("lab-ct1").node == "lab"
    assert inventory.container("lab-ct2").node == "lab2"
    report = provision(inventory, ["lab-ct1", "lab-ct2"], options=OPTIONS)
    assert report.ok, report.failures
    etc_pve = state / "pve" / "etc-pve" / "nodes"
    ct2 = inventory.container("lab-ct2")
    conf = (etc_pve / "lab2" / "lxc" / f"{ct2.vmid}.conf").read_text()
    assert not (etc_pve / "lab" / "lxc" / f"{ct2.vmid}.conf").exists()
    assert "dev0: /dev/nvidia0" in conf  # the GPUs passed through on lab2
    client = PveClient(inventory.clusters["lab"], inventory.secret("lab"))
    placed = {r["name"]: r["node"] for r in client.get("cluster/resources", type="vm")}
    assert placed == {"lab-ct1": "lab", "lab-ct2": "lab2"}
    # a private /dev/shm in each container: what one writes there, the other never sees
    for name, other in (("lab-ct1", "lab-ct2"), ("lab-ct2", "lab-ct1")):
        ct = inventory.container(name)
        with SshConnection.from_access(ct.ssh, host=ct.ssh_host, deadline=30) as conn:
            shown = conn.run("stat -c %a /dev/shm && stat -f -c %T /dev/shm").stdout
            assert shown.split() == ["1777", "tmpfs"]
            conn.run(f"touch /dev/shm/from-{name}")
            assert conn.run(f"ls /dev/shm/from-{other}", ok_codes=None).exit_code != 0
    mine = subprocess.run(["ls", "/dev/shm"], capture_output=True, text=True, check=True).stdout
    assert "from-lab-ct1" not in mine
