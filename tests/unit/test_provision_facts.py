"""Host and guest fact parsers, the probe framing, and the pure passthrough/identity helpers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import dflashops
from dflashops.errors import ProxmoxError
from dflashops.inventory.models import Container
from dflashops.proxmox.client import (
    is_already_exists,
    is_digest_conflict,
    is_locked,
    version_tuple,
)
from dflashops.proxmox.facts import (
    HOST_PROBES,
    HostFacts,
    ProbeOutput,
    host_facts_from_probes,
    parse_cgroup,
    parse_char_majors,
    parse_devices,
    parse_gpus,
    parse_pveversion,
    probe_script,
    split_probe_output,
)
from dflashops.proxmox.guest import guest_facts_from_probes
from dflashops.proxmox.identity import Resource, locate
from dflashops.proxmox.passthrough import (
    as_lxc_config,
    devn_changes,
    edit_conf_text,
    raw_changes,
    raw_lines,
)
from dflashops.proxmox.pveconfig import parse_props, render_props


def ct(**fields: object) -> Container:
    return Container.model_validate({"name": "qwen36", "cluster": "c", "node": "pve", **fields})


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("pve-manager/8.1.4/ec5affc9e41f1d79 (running kernel: 6.5.11-8-pve)", "8.1.4"),
        ("pve-manager/7.4-17/513c62be (running kernel: 5.15.143-1-pve)", "7.4.17"),
        ("pve-manager/9.1.2/lab (running kernel: 6.14.11-4-pve)", "9.1.2"),
        ("bash: pveversion: command not found", None),
    ],
)
def test_pveversion(text: str, version: str | None) -> None:
    assert parse_pveversion(text) == version


def test_devn_needs_pve_8_1() -> None:
    def host(version: str) -> HostFacts:
        return HostFacts("pve", version, "v2", None)

    assert not host("8.0.4").supports_devn()
    assert host("8.1.0").supports_devn() and host("9.1.2").supports_devn()
    assert version_tuple("8.1-2") == (8, 1, 2)


def test_cgroup_mode() -> None:
    assert parse_cgroup("cgroup2fs\n") == "v2"
    assert parse_cgroup("tmpfs\n") == "v1"  # v1 or hybrid: the v1 devices controller rules


def test_gpus_devices_and_majors() -> None:
    gpus = parse_gpus(
        "0, NVIDIA RTX A6000, 580.95.05, 49140 MiB, 00000000:01:00.0\n"
        "1, NVIDIA RTX A6000, 580.95.05, 49140 MiB, 00000000:02:00.0\n"
    )
    assert [(g.index, g.memory_mib, g.bus_id) for g in gpus] == [
        (0, 49140, "00000000:01:00.0"),
        (1, 49140, "00000000:02:00.0"),
    ]
    devices = parse_devices(
        "/dev/nvidia0 character special file c3 0\n"
        "stat: cannot statx '/dev/nvidia-uvm': No such file or directory\n"
        "/dev/nvidia-caps/nvidia-cap1 character special file 1ff 1\n"
        "/dev/nvidiactl regular empty file 0 0\n"
    )
    assert [(d.path, d.kind, d.major, d.minor) for d in devices] == [
        ("/dev/nvidia0", "char", 195, 0),
        ("/dev/nvidia-caps/nvidia-cap1", "char", 511, 1),
        ("/dev/nvidiactl", "file", 0, 0),
    ]
    majors = parse_char_majors(
        "Character devices:\n195 nvidia-frontend\n508 nvidia-uvm\n\nBlock devices:\n  8 sd\n"
    )
    assert majors == {195: "nvidia-frontend", 508: "nvidia-uvm"}


def test_probe_framing_round_trips_through_a_real_shell() -> None:
    probes = {"one": "echo hello; echo err >&2", "two": "exit 3", "three": "no-such-cmd-dfo"}
    out = subprocess.run(
        ["sh", "-c", probe_script(probes)], capture_output=True, text=True, timeout=30, check=False
    ).stdout
    split = split_probe_output(out)
    assert split["one"] == ProbeOutput("hello\nerr", 0)
    assert split["two"].rc == 3
    assert split["three"].rc == 127


def test_host_probe_on_this_machine_parses() -> None:
    """The real probe script on a machine without NVIDIA: no GPUs, a clear reason, no devices."""
    out = subprocess.run(
        ["sh", "-c", probe_script(HOST_PROBES)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    ).stdout
    facts = host_facts_from_probes("here", split_probe_output(out))
    stat = subprocess.run(
        ["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True, check=True
    )
    assert facts.cgroup == parse_cgroup(stat.stdout)
    assert facts.pve_version is None and facts.char_majors  # /proc/devices is always there
    if not facts.gpus:
        assert facts.nvidia_error is not None


def test_guest_facts() -> None:
    facts = guest_facts_from_probes(
        {
            "nvidia-smi": ProbeOutput(
                "Failed to initialize NVML: Driver/library version mismatch\n"
                "NVML library version: 570.133",
                18,
            ),
            "shm": ProbeOutput(
                "Filesystem 1B-blocks Used Available Use% Mounted on\n"
                "tmpfs 67108864 0 67108864 0% /dev/shm",
                0,
            ),
            "fstab": ProbeOutput("# x\ntmpfs  /dev/shm  tmpfs size=8G 0 0\n", 0),
            "mounts": ProbeOutput("dir /models\nmissing /data", 0),
        }
    )
    assert facts.driver_version == "570.133" and facts.visible_gpus is None
    assert facts.nvidia_error == "Failed to initialize NVML: Driver/library version mismatch"
    assert facts.shm_bytes == 64 << 20
    assert facts.fstab_shm == "tmpfs  /dev/shm  tmpfs size=8G 0 0"
    assert dict(facts.mounts) == {"/models": True, "/data": False}


# --------------------------------------------------------------------------- passthrough helpers


CONF = """\
#GPU box
arch: amd64
cores: 8
lxc.cgroup2.devices.allow: c 195:* rwm

[pve:pending]
cores: 16

[before-upgrade]
cores: 4
lxc.cgroup2.devices.allow: c 195:* rwm
"""


def test_edit_conf_inserts_before_the_first_section_and_removes_only_in_main() -> None:
    new = edit_conf_text(
        CONF,
        add=["lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file"],
        remove=["lxc.cgroup2.devices.allow: c 195:* rwm"],
    )
    main, _, rest = new.partition("\n[pve:pending]")
    assert main.endswith(
        "cores: 8\nlxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
    )
    assert "lxc.cgroup2" not in main
    assert (
        rest
        == "\ncores: 16\n\n[before-upgrade]\ncores: 4\nlxc.cgroup2.devices.allow: c 195:* rwm\n"
    )
    assert edit_conf_text(new, add=["cores: 8"], remove=[]) == new  # present: not added twice


def test_edit_conf_without_sections_appends() -> None:
    assert edit_conf_text("a: 1\n", ["b: 2"], []) == "a: 1\nb: 2\n"


def test_devn_changes_keep_indices_and_leave_foreign_devices() -> None:
    config = {
        "dev0": "/dev/net/tun",
        "dev1": "/dev/nvidia0,mode=0666",
        "dev2": "/dev/nvidia1,mode=0666",  # no longer wanted
        "dev3": "path=/dev/nvidiactl,mode=0660",  # wanted with another mode
    }
    wanted = [
        ("/dev/nvidia0", "/dev/nvidia0,mode=0666"),
        ("/dev/nvidiactl", "/dev/nvidiactl,mode=0666"),
        ("/dev/nvidia-uvm", "/dev/nvidia-uvm,mode=0666"),
    ]
    to_set, delete, unchanged = devn_changes(wanted, config)
    assert to_set == {"dev3": "/dev/nvidiactl,mode=0666", "dev4": "/dev/nvidia-uvm,mode=0666"}
    assert delete == ["dev2"]
    assert unchanged == {"dev1": "/dev/nvidia0,mode=0666"}


def test_raw_lines_and_their_plain_lxc_form() -> None:
    host = host_facts_from_probes(
        "pve",
        {
            "cgroup": ProbeOutput("tmpfs", 0),
            "devices": ProbeOutput(
                "/dev/nvidia0 character special file c3 0\n"
                "/dev/nvidia-uvm character special file 1fc 0\n",
                0,
            ),
            "chardevs": ProbeOutput(
                "Character devices:\n 10 misc\n195 nvidia\n508 nvidia-uvm\n", 0
            ),
        },
    )
    lines = raw_lines(host, ["/dev/nvidia0", "/dev/nvidia-uvm"])
    assert as_lxc_config(lines) == (
        "lxc.cgroup.devices.allow = c 195:* rwm\n"
        "lxc.cgroup.devices.allow = c 508:* rwm\n"
        "lxc.mount.entry = /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n"
        "lxc.mount.entry = /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file\n"
    )
    stale = [
        ("lxc.cgroup.devices.allow", "c 509:* rwm"),
        ("lxc.cgroup.devices.allow", "c 10:* rwm"),
    ]
    add, remove = raw_changes(lines, [*lines[:1], *stale], host)
    assert add == lines[1:]
    assert remove == stale[:1]  # 509 belongs to no driver now; 10 (misc) is someone else's


def test_property_strings() -> None:
    props = parse_props("local-lvm:vm-950-disk-0,size=64G", "volume")
    assert props == {"volume": "local-lvm:vm-950-disk-0", "size": "64G"}
    assert render_props(props, "volume") == "local-lvm:vm-950-disk-0,size=64G"


# --------------------------------------------------------------------------- identity and errors


def res(vmid: int, name: str, tags: str = "dflashops", lock: str | None = None) -> Resource:
    return Resource.from_api(
        {"vmid": vmid, "node": "pve", "name": name, "tags": tags, "status": "running", "lock": lock}
    )


def test_locate() -> None:
    found, issues = locate(ct(vmid="auto"), [res(300, "qwen36"), res(301, "other")])
    assert found is not None and found.vmid == 300 and not issues
    found, issues = locate(ct(vmid=300), [res(300, "qwen36", tags="prod;web")])
    assert found is None and issues == [
        "vmid 300 is named 'qwen36' but lacks the 'dflashops' tag "
        "(not created by dflashops; left untouched)"
    ]
    found, issues = locate(ct(vmid=300), [res(301, "qwen36")])
    assert found is None and issues == [
        "qwen36 already exists as vmid 301 (the inventory says 300)"
    ]
    found, issues = locate(ct(vmid="auto"), [res(305, "qwen36"), res(302, "qwen36")])
    assert found is not None and found.vmid == 302  # a concurrent create: the lowest wins
    found, issues = locate(ct(vmid=300), [res(300, "CT300", tags="", lock="create")])
    assert found is None and "being created" in issues[0]


def test_error_classes() -> None:
    assert is_locked(ProxmoxError("PUT x: CT is locked (backup)", status=500))
    assert is_locked(ProxmoxError("task vzstart failed: CT is locked (snapshot)"))
    assert is_already_exists(ProxmoxError("POST x: CT 950 already exists on node 'pve'"))
    assert is_already_exists(
        ProxmoxError(
            "GET cluster/nextid: Parameter verification failed.",
            status=400,
            errors={"vmid": "VM 950 already exists"},
        )
    )
    assert is_digest_conflict(
        ProxmoxError("detected modified configuration - file changed by other user? Try again.")
    )


def test_no_product_code_recognises_the_lab() -> None:
    """The PVE double behaves like PVE; what differs in the lab is an inventory setting."""
    package = Path(dflashops.__file__).parent
    lookers = [
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.relative_to(package).parts[0] != "lab" and "dflashopslab" in path.read_text()
    ]
    assert lookers == []
