"""The lab's sshd hosts themselves: private hostname, network and files; faults; teardown."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.host_network import HostNetwork
from dflashops.lab.hosts import host_exec, remove_netns_hosts, start_netns_host
from dflashops.remote import put_atomic
from tests.support.faults import clear_rate_limit, limit_rate
from tests.support.ssh_hosts import HOST_PREFIX, HostFactory, connect_to

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]


def test_hosts_have_their_own_name_address_and_private_dirs(
    netns_hosts: list[SshHost],
) -> None:
    h1, h2 = netns_hosts
    with connect_to(h1) as c1, connect_to(h2) as c2:
        c1.run("echo mine > /srv/private")
        assert c2.run("test -e /srv/private", ok_codes=(1,)).exit_code == 1
        assert c1.run("cat /srv/private").stdout == "mine\n"
        addresses = c1.run("ip -4 -o addr show dev eth0").stdout
        assert f"inet {h1.address}/24" in addresses
        # hosts on one bridge reach each other
        assert c1.run(f"exec 3<>/dev/tcp/{h2.address}/22 && head -c 4 <&3").stdout == "SSH-"
    assert not Path("/srv/private").exists()  # nothing landed on this machine


def test_overlay_bind_and_restart_semantics(
    ssh_network: HostNetwork, netns_host_factory: HostFactory, tmp_path: Path
) -> None:
    upper = tmp_path / "etc-upper"
    shared = tmp_path / "models"
    shared.mkdir()
    (shared / "weights.txt").write_text("w\n")
    host = netns_host_factory(
        mounts=[
            Mount.overlay("/etc", upper=upper),
            Mount.tmpfs("/srv"),
            Mount.bind(shared, "/models"),
            Mount.tmpfs("/root"),
        ]
    )
    with connect_to(host) as conn:
        conn.run("mkdir -p /etc/dflashops && echo cfg > /etc/dflashops/x && echo t > /srv/t")
        assert conn.run("cat /models/weights.txt").stdout == "w\n"
        assert conn.run("touch /models/new", ok_codes=(1,)).exit_code == 1  # read-only
        assert conn.run("test -s /etc/passwd").ok  # the rest of /etc is still there
    assert not Path("/etc/dflashops/x").exists()
    assert (upper / "upper" / "dflashops" / "x").read_text() == "cfg\n"
    host = ssh_network.restart_host(host)  # a reboot: overlay upper kept, tmpfs emptied
    with connect_to(host) as conn:
        assert conn.run("cat /etc/dflashops/x").stdout == "cfg\n"
        assert conn.run("test -e /srv/t", ok_codes=(1,)).exit_code == 1
    assert host_exec(host, ["hostname"]).stdout.decode().strip() == host.name


def test_rate_limit_slows_uploads(netns_host_factory: HostFactory) -> None:
    host = netns_host_factory()
    payload = bytes(200_000)
    with connect_to(host) as conn:
        conn.open()
        limit_rate(host, "1mbit")
        started = time.monotonic()
        put_atomic(conn, payload, "/srv/slow")
        slow = time.monotonic() - started
        clear_rate_limit(host)
        started = time.monotonic()
        put_atomic(conn, payload + b"x", "/srv/fast")
        fast = time.monotonic() - started
    assert slow > 1.4  # 1.6 Mbit at 1 Mbit/s
    assert fast < slow / 2


def test_leftovers_of_a_crashed_run_are_swept(ssh_network: HostNetwork, tmp_path: Path) -> None:
    name = f"{HOST_PREFIX}stale"
    # a "crashed run": namespace, veth and sshd nobody will stop
    stale = start_netns_host(
        name, bridge=ssh_network.bridge, address="10.200.1.250/24", workdir=tmp_path
    )
    # starting again under the same name replaces it
    again = start_netns_host(
        name, bridge=ssh_network.bridge, address="10.200.1.250/24", workdir=tmp_path
    )
    assert stale.process is not None and stale.process.wait(timeout=5) == -9
    assert again.process is not None and again.process.poll() is None
    assert remove_netns_hosts(f"{HOST_PREFIX}st") == [name]
    assert again.process.wait(timeout=5) is not None
    namespaces = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True
    ).stdout
    assert name not in namespaces
    assert not Path(f"/sys/class/net/v-{name}").exists()
