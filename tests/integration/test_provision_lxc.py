"""The raw lines dflashops renders work in a real LXC container (lxc 5, this machine).

The lines are the ones a provision plan writes into the PVE config file, for facts probed here:
this machine's cgroup mode and a real ``stat`` of fake NVIDIA device nodes made with ``mknod``.
They are translated for plain LXC (``key: value`` -> ``key = value``, ``/dev/...`` sources -> the
fake device folder) and start a busybox container in a private lxcpath. Inside, the passed nodes are
character devices with the right numbers and open with ENXIO (allowed by the device cgroup, no
driver behind them), while a node outside the rules is refused with EPERM.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.inventory.models import Container
from dflashops.proxmox.containerplan import EditConf, PlanInputs
from dflashops.proxmox.facts import (
    HOST_PROBES,
    HostFacts,
    ProbeOutput,
    SiteFacts,
    StorageInfo,
    host_facts_from_probes,
    probe_script,
    split_probe_output,
)
from dflashops.proxmox.plan import plan_container

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]

NAME = "dfoprov-lxc"
FAKE_NODES = {  # name -> (major, minor); 511 stands for nvidia-uvm's dynamic major
    "nvidia0": (195, 0),
    "nvidiactl": (195, 255),
    "nvidia-uvm": (511, 0),
    "nvidia-uvm-tools": (511, 1),
    "forbidden": (10, 200),  # bound in too, but no rule allows it
}
# PVE's base config denies every device and allows the basics; dflashops' lines come on top
BASE_ALLOWS = (
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:0 rwm",
    "c 5:1 rwm",
    "c 5:2 rwm",
    "c 136:* rwm",
)


def run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


@pytest.fixture
def lxcpath(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("LXC and mknod need root")
    for tool in ("lxc-create", "lxc-start", "lxc-attach", "busybox"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing (scripts/setup.sh installs lxc and busybox-static)")
    path = tmp_path / "lxc"
    path.mkdir()
    yield path
    run("lxc-stop", "-P", str(path), "-n", NAME, "-k", check=False)
    run("lxc-destroy", "-P", str(path), "-n", NAME, "-f", check=False)


def written_raw_lines(host: HostFacts) -> tuple[str, ...]:
    """The lines a provision plan adds over SSH for a new raw-passthrough GPU container."""
    ct = Container.model_validate(
        {"name": "t", "cluster": "c", "node": "n", "gpus": [0], "passthrough": "raw"}
    )
    site = SiteFacts(
        node="n",
        api_version="9.1.2",
        storages=(StorageInfo("local-lvm", frozenset({"rootdir"})),),
        templates=frozenset({ct.template}),
    )
    plan = plan_container(
        PlanInputs(
            ct, "n", can_set_devices=True, ssh_public_key="ssh-ed25519 AAAA t", site=site, host=host
        )
    )
    assert not plan.issues, plan.issues
    return next(step for step in plan.steps if isinstance(step, EditConf)).add


def attach(lxcpath: Path, command: str) -> subprocess.CompletedProcess[str]:
    return run(
        "lxc-attach", "-P", str(lxcpath), "-n", NAME, "--", "/bin/sh", "-c", command, check=False
    )


def test_rendered_raw_lines_start_a_real_container_with_device_rules(
    lxcpath: Path, tmp_path: Path
) -> None:
    fakedev = tmp_path / "fakedev"
    fakedev.mkdir()
    for name, (major, minor) in FAKE_NODES.items():
        os.mknod(fakedev / name, 0o666 | 0o020000, os.makedev(major, minor))
    # the node probe, run here: cgroup mode of this machine, /proc/devices, and a real stat of
    # the fake nodes, reported under /dev as on a PVE node
    local = split_probe_output(
        run("sh", "-c", probe_script({k: HOST_PROBES[k] for k in ("cgroup", "chardevs")})).stdout
    )
    stat = run("stat", "-c", "%n %F %t %T", *sorted(str(p) for p in fakedev.iterdir()))
    local["devices"] = ProbeOutput(stat.stdout.replace(f"{fakedev}/", "/dev/"), 0)
    local["nvidia-smi"] = ProbeOutput("0, NVIDIA RTX A6000, 580.95.05, 49140 MiB, 0:1:0.0", 0)
    host = host_facts_from_probes("here", local)
    # what provision writes into /etc/pve/nodes/<node>/lxc/<vmid>.conf, PVE syntax
    pve_lines = list(written_raw_lines(host))
    key = "lxc.cgroup2.devices.allow" if host.cgroup == "v2" else "lxc.cgroup.devices.allow"
    assert f"{key}: c 195:* rwm" in pve_lines and f"{key}: c 511:* rwm" in pve_lines

    # plain LXC wants "key = value"; the sources become the fake device folder
    plain = "".join(
        line.replace(": ", " = ", 1).replace(" = /dev/", f" = {fakedev}/") + "\n"
        for line in pve_lines
    )
    deny = key.replace(".allow", ".deny")
    config = tmp_path / "ct.conf"
    config.write_text(
        "lxc.net.0.type = empty\n"
        "lxc.apparmor.profile = unconfined\n"
        f"{deny} = a\n"
        + "".join(f"{key} = {rule}\n" for rule in BASE_ALLOWS)
        + plain
        + f"lxc.mount.entry = {fakedev}/forbidden dev/forbidden none bind,optional,create=file\n"
    )
    run("lxc-create", "-P", str(lxcpath), "-n", NAME, "-f", str(config), "-t", "busybox")
    started = run("lxc-start", "-P", str(lxcpath), "-n", NAME, "-d", check=False)
    assert started.returncode == 0, started.stderr
    run("lxc-wait", "-P", str(lxcpath), "-n", NAME, "-s", "RUNNING", "-t", "20")

    shown = attach(lxcpath, "stat -c '%n %F %t %T' /dev/nvidia0 /dev/nvidiactl /dev/nvidia-uvm")
    assert shown.stdout.splitlines() == [
        "/dev/nvidia0 character special file c3 0",
        "/dev/nvidiactl character special file c3 ff",
        "/dev/nvidia-uvm character special file 1ff 0",
    ]
    for node in ("nvidia0", "nvidiactl", "nvidia-uvm"):
        opened = attach(lxcpath, f"cat /dev/{node}")
        assert opened.returncode != 0
        assert "No such device or address" in opened.stderr, (node, opened.stderr)  # ENXIO
    refused = attach(lxcpath, "cat /dev/forbidden")
    assert refused.returncode != 0
    assert "Operation not permitted" in refused.stderr  # EPERM: the device cgroup said no
