"""Containers started through the PVE double become real SSH hosts (netns + private dirs)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
from proxmoxer.tools import Tasks

from dflashops.lab.hosts import netns_unavailable_reason, remove_netns_host, remove_netns_hosts
from dflashops.lab.pve import PveDouble, serve_double
from dflashops.lab.pve.containers import NetnsContainers, host_name

pytestmark = [pytest.mark.root, pytest.mark.timeout(180)]

# a bridge and subnet of their own, so these tests never touch dfotest0 or the lab's dfolab0
BRIDGE = "dfotpve0"
NETWORK = "10.200.7.0/24"
PREFIX = "dfoz-ct"  # not the default lab's dfo-ct: a running default lab keeps its containers
TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"


@pytest.fixture(scope="module")
def client_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("keys") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    return key


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[PveDouble, NetnsContainers]]:
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
    remove_netns_hosts(PREFIX)  # leftovers of a crashed earlier run of these tests
    with (
        NetnsContainers(
            tmp_path / "cts", bridge=BRIDGE, network=NETWORK, own_bridge=True, host_prefix=PREFIX
        ) as cts,
        serve_double(tmp_path / "pve", backend=cts, create_delay=0.1, task_delay=0.02) as double,
    ):
        yield double, cts


def wait_ok(prox: Any, upid: str) -> None:
    status = Tasks.blocking_status(prox, upid, timeout=60, polling_interval=0.05)
    assert status is not None and status["exitstatus"] == "OK", status


def start_container(prox: Any, vmid: int, key: Path, **params: Any) -> None:
    params.setdefault("ostemplate", TEMPLATE)
    params.setdefault("rootfs", "local-lvm:8")
    upid = prox.nodes("lab").lxc.post(
        vmid=vmid, **{"ssh-public-keys": Path(f"{key}.pub").read_text()}, **params
    )
    wait_ok(prox, upid)
    wait_ok(prox, prox.nodes("lab").lxc(vmid).status.start.post())


def address_of(prox: Any, vmid: int) -> str:
    eth0 = next(i for i in prox.nodes("lab").lxc(vmid).interfaces.get() if i["name"] == "eth0")
    return str(eth0["inet"].split("/")[0])


def ssh(cts: NetnsContainers, vmid: int, address: str, key: Path) -> paramiko.SSHClient:
    """Log in as root with the injected key, verifying the host key the host was started with."""
    host = cts.host(vmid)
    assert host is not None
    client = paramiko.SSHClient()
    client.load_host_keys(str(host.known_hosts))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        address, username="root", key_filename=str(key), look_for_keys=False,
        allow_agent=False, timeout=10,
    )  # fmt: skip
    return client


def run(client: paramiko.SSHClient, command: str) -> tuple[int, str]:
    _, stdout, _ = client.exec_command(command, timeout=20)
    output = stdout.read().decode()
    return stdout.channel.recv_exit_status(), output


def test_started_container_is_reachable_with_the_injected_key(
    lab: tuple[PveDouble, NetnsContainers], client_key: Path, tmp_path: Path
) -> None:
    double, cts = lab
    prox = double.client()
    start_container(prox, 901, client_key, hostname="lab-ct1",
                    net0="name=eth0,bridge=vmbr0,ip=10.200.7.31/24,gw=10.200.7.1")  # fmt: skip
    interfaces = {i["name"]: i for i in prox.nodes("lab").lxc(901).interfaces.get()}
    assert interfaces["eth0"]["inet"] == "10.200.7.31/24"
    hwaddr = prox.nodes("lab").lxc(901).config.get()["net0"].split("hwaddr=")[1].split(",")[0]
    assert interfaces["eth0"]["hwaddr"] == hwaddr  # the config's MAC is the interface's
    with ssh(cts, 901, "10.200.7.31", client_key) as client:
        assert run(client, "hostname; id -u") == (0, "lab-ct1\n0\n")
    other_key = tmp_path / "other"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True
    )
    with pytest.raises(paramiko.AuthenticationException):
        ssh(cts, 901, "10.200.7.31", other_key)


def test_containers_have_private_files(
    lab: tuple[PveDouble, NetnsContainers], client_key: Path
) -> None:
    double, cts = lab
    prox = double.client()
    start_container(prox, 902, client_key)
    start_container(prox, 903, client_key)
    first, second = address_of(prox, 902), address_of(prox, 903)
    assert first != second and first.startswith("10.200.7.")
    paths = ("/etc/dflashops/marker", "/opt/dflashops/marker", "/root/marker", "/srv/marker",
             "/var/log/dflashops/marker")  # fmt: skip
    write = "; ".join(f"mkdir -p $(dirname {p}) && echo ct902 > {p}" for p in paths)
    with ssh(cts, 902, first, client_key) as one, ssh(cts, 903, second, client_key) as two:
        assert run(one, write)[0] == 0
        assert run(one, f"cat {' '.join(paths)}") == (0, "ct902\n" * len(paths))
        for path in paths:
            assert run(two, f"test -e {path}")[0] == 1, f"{path} leaked into the other container"
            assert not Path(path).exists(), f"{path} leaked onto the host"
    # a container's files survive stop and start, like a container disk
    wait_ok(prox, prox.nodes("lab").lxc(902).status.stop.post())
    wait_ok(prox, prox.nodes("lab").lxc(902).status.start.post())
    with ssh(cts, 902, address_of(prox, 902), client_key) as again:
        assert run(again, "cat /etc/dflashops/marker") == (0, "ct902\n")


def test_destroy_removes_the_host_and_its_files(
    lab: tuple[PveDouble, NetnsContainers], client_key: Path
) -> None:
    double, cts = lab
    prox = double.client()
    start_container(prox, 904, client_key)
    with ssh(cts, 904, address_of(prox, 904), client_key) as client:
        assert run(client, "mkdir -p /etc/dflashops && echo x > /etc/dflashops/marker")[0] == 0
    assert cts.container_dir(904).exists()
    wait_ok(prox, prox.nodes("lab").lxc(904).delete(force=1))
    assert not cts.container_dir(904).exists()
    assert not Path("/run/netns", host_name(904, PREFIX)).exists()
    assert cts.host(904) is None
    assert prox.nodes("lab").lxc.get() == []


def test_a_container_that_died_under_the_double_reads_stopped_and_starts_again(
    lab: tuple[PveDouble, NetnsContainers], client_key: Path
) -> None:
    double, cts = lab
    prox = double.client()
    start_container(prox, 905, client_key)
    host = cts.host(905)
    assert host is not None
    remove_netns_host(host.netns or "")  # its init and namespace vanish, as after an OOM kill
    ct = prox.nodes("lab").lxc(905)
    assert ct.status.current.get()["status"] == "stopped"  # not a 500 from a dead namespace
    assert cts.host(905) is None
    wait_ok(prox, ct.status.start.post())
    with ssh(cts, 905, address_of(prox, 905), client_key) as client:
        assert run(client, "true") == (0, "")
