"""The lab end to end through the real CLI: up, status, a container over SSH, the node host, down.

An isolated lab (own bridge, subnet, API port, state and run folders) so a user's lab on the
same machine is never touched.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.errors import ProxmoxError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.proxmox.client import PveClient
from dflashops.remote import SshConnection
from tests.support.lab import isolated_lab_env, require_lab, run_cli

pytestmark = pytest.mark.root

CIDR = "10.200.9.0/24"
TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"


@pytest.fixture(scope="module")
def lab_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_lab()
    env = isolated_lab_env(tmp_path_factory.mktemp("labstate"), tag="t", cidr=CIDR)
    yield env
    dflashops(env, "lab", "down", check=False)


dflashops = run_cli


@pytest.fixture(scope="module")
def running_lab(lab_env: dict[str, str]) -> dict[str, object]:
    up = dflashops(lab_env, "lab", "up", "--json")
    status: dict[str, object] = json.loads(up.stdout)
    return status


@pytest.fixture(scope="module")
def inventory(running_lab: dict[str, object]) -> Inventory:
    return load_inventory(Path(str(running_lab["inventory"])))


def test_up_status_and_idempotent_up(
    lab_env: dict[str, str], running_lab: dict[str, object]
) -> None:
    assert running_lab["running"] is True
    status = json.loads(dflashops(lab_env, "lab", "status", "--json").stdout)
    assert status["api_url"] == f"https://127.0.0.1:{lab_env['DFLASHOPS_LAB_API_PORT']}/api2/json"
    assert status["node"]["address"] == "10.200.9.2"
    again = json.loads(dflashops(lab_env, "lab", "up", "--json").stdout)
    assert again["pid"] == status["pid"]  # the same daemon: nothing restarted


def test_inventory_is_valid_and_secrets_resolve(inventory: Inventory) -> None:
    inventory.check_secrets()
    ct = inventory.container("lab-ct1")
    assert ct.network.address == "10.200.9.10"
    assert inventory.clusters["lab"].can_set_devices


def test_node_host_answers_like_a_pve_node(inventory: Inventory) -> None:
    node = inventory.node_of(inventory.container("lab-ct1"))
    with SshConnection.from_access(node.ssh, deadline=30) as conn:
        assert conn.run("pveversion").stdout.startswith("pve-manager/9.1.2/")
        gpus = conn.run("nvidia-smi --query-gpu=index,driver_version --format=csv,noheader")
        assert gpus.stdout.split() == ["0,", "580.95.05", "1,", "580.95.05"]
        devices = conn.run("stat -c '%n %t' /dev/nvidia0 /dev/nvidia-uvm").stdout.split()
        assert devices == ["/dev/nvidia0", "c3", "/dev/nvidia-uvm", "1ff"]  # majors 195, 511
        assert conn.run("stat -fc %T /sys/fs/cgroup").stdout.strip() == "cgroup2fs"
    assert not Path("/dev/nvidia0").exists()  # made in the node's private /dev only


def test_container_becomes_a_private_ssh_host_and_raw_lines_reach_the_api(
    inventory: Inventory,
) -> None:
    client = PveClient(inventory.clusters["lab"], inventory.secret("lab"))
    ct = inventory.container("lab-ct1")
    key = Path(f"{ct.ssh.key_file}.pub").read_text()
    for vmid, ip in ((930, "10.200.9.30"), (931, "10.200.9.31")):
        upid = client.post(
            "nodes/lab/lxc",
            vmid=vmid,
            ostemplate=TEMPLATE,
            storage="local-lvm",
            hostname=f"t{vmid}",
            net0=f"name=eth0,bridge=vmbr0,ip={ip}/24",
            tags="dflashops",
            **{"ssh-public-keys": key},
        )
        client.wait_task(upid, timeout_s=60)
        client.wait_task(client.post(f"nodes/lab/lxc/{vmid}/status/start"), timeout_s=60)
    ifaces = client.get("nodes/lab/lxc/930/interfaces")
    assert any(i["name"] == "eth0" and i["inet"] == "10.200.9.30/24" for i in ifaces)

    with SshConnection.from_access(ct.ssh, host="10.200.9.30", deadline=30) as one:
        assert one.run("hostname").stdout.strip() == "t930"
        one.run("mkdir -p /etc/dflashops && echo mine > /etc/dflashops/marker")
    with SshConnection.from_access(ct.ssh, host="10.200.9.31", deadline=30) as two:
        assert two.run("test -e /etc/dflashops/marker", ok_codes=(1,)).exit_code == 1
    assert not Path("/etc/dflashops/marker").exists()

    node = inventory.node_of(ct)
    before = client.get("nodes/lab/lxc/930/config")
    with SshConnection.from_access(node.ssh, deadline=30) as conn:
        conn.run("echo 'lxc.cgroup2.devices.allow: c 195:* rwm' >> /etc/pve/lxc/930.conf")
    after = client.get("nodes/lab/lxc/930/config")
    assert ["lxc.cgroup2.devices.allow", "c 195:* rwm"] in after["lxc"]
    assert after["digest"] != before["digest"]

    for vmid in (930, 931):
        client.wait_task(client.post(f"nodes/lab/lxc/{vmid}/status/stop"), timeout_s=60)
        client.wait_task(client.delete(f"nodes/lab/lxc/{vmid}"), timeout_s=60)
    with pytest.raises(ProxmoxError, match="does not exist"):
        client.get("nodes/lab/lxc/930/config")
    netns = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert "dfot-ct930" not in netns.split()  # this lab's prefix (node host dfo-nodet)


def test_down_removes_everything(lab_env: dict[str, str], running_lab: dict[str, object]) -> None:
    done = dflashops(lab_env, "lab", "down")
    assert "lab stopped" in done.stdout
    assert not Path(lab_env["DFLASHOPS_LAB_STATE"]).exists()
    links = subprocess.run(
        ["ip", "link", "show"], capture_output=True, text=True, check=True
    ).stdout
    assert "dfolabt0" not in links
    status = json.loads(dflashops(lab_env, "lab", "status", "--json").stdout)
    assert status["running"] is False
    again = dflashops(lab_env, "lab", "down")  # idempotent
    assert "not running" in again.stdout
