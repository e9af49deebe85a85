"""Facts a provision plan is made from: the PVE node (over SSH) and the cluster (over the API).

Probes return typed, frozen facts and nothing else; every parser is a pure function of command
output, so plans are tested from canned outputs (``tests/fixtures/provision/``).

The node probe is one SSH command that runs every host probe and prints each one's output and
exit code between markers (one round trip):

- ``pveversion`` -> the PVE release of this node;
- ``stat -fc %T /sys/fs/cgroup`` -> ``cgroup2fs`` means cgroup v2 (else v1 or hybrid);
- ``nvidia-smi --query-gpu=...`` -> driver version and GPUs;
- one ``stat -c '%n %F %t %T'`` over the NVIDIA device nodes -> which exist, and their majors;
- ``/proc/devices`` -> which driver owns each character major now (nvidia-uvm's is dynamic, so
  a raw allow line for a major nobody owns any more is stale).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dflashops.errors import ProxmoxError
from dflashops.proxmox.client import PveClient, version_tuple
from dflashops.proxmox.identity import split_tags
from dflashops.remote import SshConnection

CgroupMode = Literal["v1", "v2"]
NVIDIA_MAJOR = 195
GPU_QUERY = "index,name,driver_version,memory.total,pci.bus_id"
SHARED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
UVM_NODES = ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
# how to make /dev/nvidia-uvm appear on a headless host (it is created when nvidia-uvm loads)
UVM_FIX = (
    "on the node run `nvidia-modprobe -u -c=0` (creates /dev/nvidia-uvm now); to keep it "
    "across reboots run nvidia-persistenced or add nvidia-uvm to "
    "/etc/modules-load.d/nvidia.conf"
)

HOST_PROBES: dict[str, str] = {
    "pveversion": "pveversion",
    "cgroup": "stat -fc %T /sys/fs/cgroup",
    "nvidia-smi": f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,noheader",
    "devices": "stat -c '%n %F %t %T' /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-uvm "
    "/dev/nvidia-uvm-tools /dev/nvidia-modeset /dev/nvidia-caps/*",
    "chardevs": "cat /proc/devices",
}
_MARK = "@@dflashops-probe"


# --------------------------------------------------------------------------- probe framing


def probe_script(probes: Mapping[str, str]) -> str:
    """One shell script running every probe, framing each output with its name and exit code."""
    parts = []
    for name, command in probes.items():
        parts.append(f"echo '{_MARK} {name}'; ( {command} ) 2>&1; echo \"{_MARK}-rc $?\"")
    return "\n".join(parts) + "\n"


@dataclass(frozen=True)
class ProbeOutput:
    """What one framed probe printed (stdout and stderr together) and its exit code."""

    text: str
    rc: int

    @property
    def ok(self) -> bool:
        return self.rc == 0


def split_probe_output(output: str) -> dict[str, ProbeOutput]:
    """Undo :func:`probe_script`'s framing."""
    found: dict[str, ProbeOutput] = {}
    name: str | None = None
    lines: list[str] = []
    for line in output.splitlines():
        if line.startswith(f"{_MARK}-rc "):
            if name is not None:
                rc = line.split()[-1]
                found[name] = ProbeOutput("\n".join(lines), int(rc) if rc.isdigit() else -1)
            name, lines = None, []
        elif line.startswith(f"{_MARK} "):
            name, lines = line.split(" ", 1)[1].strip(), []
        elif name is not None:
            lines.append(line)
    return found


# --------------------------------------------------------------------------- host facts


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    driver_version: str
    memory_mib: int
    bus_id: str


@dataclass(frozen=True)
class DeviceNode:
    """A device node on the host as ``stat`` saw it (majors are decimal here)."""

    path: str
    kind: str  # "char", "block", "file", "dir", ...
    major: int
    minor: int

    @property
    def is_char(self) -> bool:
        return self.kind == "char"


@dataclass(frozen=True)
class HostFacts:
    """The PVE node as far as GPU passthrough cares."""

    node: str
    pve_version: str | None
    cgroup: CgroupMode
    driver_version: str | None
    gpus: tuple[Gpu, ...] = ()
    devices: tuple[DeviceNode, ...] = ()
    nvidia_error: str | None = None  # why nvidia-smi gave no answer
    char_majors: Mapping[int, str] = field(default_factory=dict)  # /proc/devices

    def nvidia_majors(self) -> set[int]:
        """Majors NVIDIA's drivers hold now (195 always: it is fixed)."""
        majors = {NVIDIA_MAJOR}
        majors |= {d.major for d in self.devices if d.path.startswith("/dev/nvidia")}
        majors |= {m for m, name in self.char_majors.items() if name.startswith("nvidia")}
        return majors

    def device(self, path: str) -> DeviceNode | None:
        return next((d for d in self.devices if d.path == path and d.is_char), None)

    @property
    def has_uvm(self) -> bool:
        return all(self.device(path) is not None for path in UVM_NODES)

    @property
    def caps(self) -> tuple[DeviceNode, ...]:
        return tuple(d for d in self.devices if d.path.startswith("/dev/nvidia-caps/"))

    def supports_devn(self) -> bool:
        """``devN`` entries exist from pve-container 5.0.7, i.e. PVE 8.1."""
        return self.pve_version is not None and version_tuple(self.pve_version) >= (8, 1)


def parse_pveversion(text: str) -> str | None:
    """``pve-manager/8.1.4/ec5affc9e41f1d79 (running kernel: ...)`` -> ``8.1.4``."""
    match = re.search(r"pve-manager/(\d+\.\d+(?:[.-]\d+)?)", text)
    return match.group(1).replace("-", ".") if match else None


def parse_cgroup(text: str) -> CgroupMode:
    """``cgroup2fs`` is the unified hierarchy; ``tmpfs`` (v1 or hybrid) means v1 device rules."""
    return "v2" if text.strip() == "cgroup2fs" else "v1"


def parse_gpus(text: str) -> tuple[Gpu, ...]:
    """``nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id`` rows."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != 5 or not cells[0].isdigit():
            continue
        memory = re.match(r"(\d+)", cells[3])
        gpus.append(
            Gpu(
                index=int(cells[0]),
                name=cells[1],
                driver_version=cells[2],
                memory_mib=int(memory.group(1)) if memory else 0,
                bus_id=cells[4],
            )
        )
    return tuple(gpus)


_STAT_KINDS = {
    "character special file": "char",
    "block special file": "block",
    "regular file": "file",
    "regular empty file": "file",
    "directory": "dir",
    "symbolic link": "link",
}


def parse_devices(text: str) -> tuple[DeviceNode, ...]:
    """``stat -c '%n %F %t %T'`` lines (majors and minors in hex); errors for absent nodes skip."""
    nodes = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4 or not fields[0].startswith("/dev/"):
            continue  # "stat: cannot statx '/dev/nvidia-uvm': No such file or directory"
        try:
            major, minor = int(fields[-2], 16), int(fields[-1], 16)
        except ValueError:
            continue
        kind = " ".join(fields[1:-2])
        nodes.append(DeviceNode(fields[0], _STAT_KINDS.get(kind, kind), major, minor))
    return tuple(nodes)


def parse_char_majors(text: str) -> dict[int, str]:
    """The "Character devices:" part of ``/proc/devices``: major -> driver name."""
    majors: dict[int, str] = {}
    in_char = False
    for line in text.splitlines():
        if line.strip().endswith("devices:"):
            in_char = line.strip() == "Character devices:"
            continue
        fields = line.split()
        if in_char and len(fields) == 2 and fields[0].isdigit():
            majors[int(fields[0])] = fields[1]
    return majors


def host_facts_from_probes(node: str, probes: Mapping[str, ProbeOutput]) -> HostFacts:
    """Typed host facts from the framed outputs of :data:`HOST_PROBES`."""

    def output(name: str) -> ProbeOutput:
        return probes.get(name, ProbeOutput("", 127))

    smi = output("nvidia-smi")
    gpus = parse_gpus(smi.text) if smi.ok else ()
    nvidia_error = None
    if not smi.ok:
        nvidia_error = (smi.text.strip().splitlines() or [f"exit {smi.rc}"])[-1]
        if smi.rc == 127:
            nvidia_error = "nvidia-smi not found (no NVIDIA driver on the node?)"
    drivers = sorted({gpu.driver_version for gpu in gpus})
    return HostFacts(
        node=node,
        pve_version=parse_pveversion(output("pveversion").text),
        cgroup=parse_cgroup(output("cgroup").text),
        driver_version=drivers[0] if drivers else None,
        gpus=gpus,
        devices=parse_devices(output("devices").text),
        nvidia_error=nvidia_error,
        char_majors=parse_char_majors(output("chardevs").text),
    )


def probe_host(conn: SshConnection, node: str, *, deadline: float = 60.0) -> HostFacts:
    """Run :data:`HOST_PROBES` on the node in one SSH command."""
    result = conn.run(probe_script(HOST_PROBES), deadline=deadline, display="host facts probe")
    return host_facts_from_probes(node, split_probe_output(result.stdout))


# --------------------------------------------------------------------------- cluster facts


@dataclass(frozen=True)
class StorageInfo:
    name: str
    content: frozenset[str]
    avail: int | None = None


@dataclass(frozen=True)
class SiteFacts:
    """The node as the API shows it: PVE version, storages, templates present and downloadable."""

    node: str
    api_version: str
    storages: tuple[StorageInfo, ...] = ()
    templates: frozenset[str] = frozenset()  # volids present, e.g. local:vztmpl/x.tar.zst
    appliances: frozenset[str] = frozenset()  # template file names in the appliance index

    def storage(self, name: str) -> StorageInfo | None:
        return next((s for s in self.storages if s.name == name), None)


def probe_site(client: PveClient, node: str, template_storages: set[str]) -> SiteFacts:
    """Storages of ``node``, the templates in ``template_storages`` and the appliance index."""
    info = client.version_info()
    storages = tuple(
        StorageInfo(
            name=str(item["storage"]),
            content=frozenset(str(item.get("content", "")).split(",")) - {""},
            avail=int(item["avail"]) if item.get("avail") is not None else None,
        )
        for item in client.storages(node)
    )
    known = {s.name for s in storages}
    templates: set[str] = set()
    for storage in sorted(template_storages & known):
        for item in client.storage_content(node, storage, "vztmpl"):
            templates.add(str(item["volid"]))
    try:
        appliances = frozenset(str(a["template"]) for a in client.appliances(node))
    except ProxmoxError:  # no Sys.Audit: downloads are then planned as unavailable
        appliances = frozenset()
    return SiteFacts(
        node=node,
        api_version=str(info.get("version", "")),
        storages=storages,
        templates=frozenset(templates),
        appliances=appliances,
    )


@dataclass(frozen=True)
class ExistingCt:
    """A container as PVE has it now: config (pending changes applied), pending keys, state."""

    vmid: int
    node: str
    status: str
    lock: str | None
    config: Mapping[str, Any]
    pending: frozenset[str] = frozenset()  # keys changed or deleted but not yet in effect
    raw: tuple[tuple[str, str], ...] = ()  # the raw lxc.* lines, in file order

    @property
    def digest(self) -> str:
        return str(self.config.get("digest", ""))

    @property
    def name(self) -> str:
        return str(self.config.get("hostname", ""))

    @property
    def tags(self) -> list[str]:
        return split_tags(self.config.get("tags"))

    @property
    def running(self) -> bool:
        return self.status == "running"


def read_existing(client: PveClient, node: str, vmid: int) -> ExistingCt:
    """Config, pending keys and state of one container."""
    config = client.ct_config(node, vmid)
    pending = frozenset(
        str(item["key"])
        for item in client.ct_pending(node, vmid)
        if "pending" in item or item.get("delete")
    )
    status = client.ct_status(node, vmid)
    raw = tuple((str(k), str(v)) for k, v in config.get("lxc", []) or [])
    return ExistingCt(
        vmid=vmid,
        node=node,
        status=str(status.get("status", "")),
        lock=str(status["lock"]) if status.get("lock") else None,
        config=config,
        pending=pending,
        raw=raw,
    )
