"""The lab's PVE node hosts: what ``provision`` probes over SSH on a real Proxmox node, faked.

The lab's cluster has two (``lab`` and ``lab2``, one ``/etc/pve``). Each node host is a
network-namespace host with its own sshd (see :mod:`dflashops.lab.hosts`) and a private mount
namespace in which:

- ``/usr/local/sbin`` holds ``pveversion``, ``nvidia-smi`` and ``pct`` that answer like the real
  tools (version, driver and GPUs come from :class:`NodeSpec`);
- ``/dev`` is a private tmpfs with the usual nodes plus ``/dev/nvidia*`` made with ``mknod``
  (major 195 for GPUs and ``nvidiactl``; a "dynamic" major for ``nvidia-uvm``, which can be left
  out to reproduce the failure PVE reports at container start);
- ``/etc/pve`` is the directory the PVE API double reads and writes, so raw ``lxc.*`` lines
  written over SSH show up in the API's ``config`` and digest;
- ``/sys/fs/cgroup`` is a cgroup2 mount when the spec says the host runs cgroup v2.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from dflashops.lab.host_model import Mount

NVIDIA_MAJOR = 195
UVM_MAJOR = 511  # dynamically allocated on real hosts; any free major will do here


@dataclass(frozen=True)
class FakeGpu:
    name: str = "NVIDIA RTX A6000"
    memory_mib: int = 49140
    bus_id: str = "00000000:01:00.0"


@dataclass(frozen=True)
class NodeSpec:
    """What the fake node reports. Defaults mirror the reference host (PVE 9, 2x RTX A6000)."""

    pve_version: str = "9.1.2"
    kernel: str = "6.14.11-4-pve"
    driver_version: str = "580.95.05"
    cuda_version: str = "13.0"
    gpus: tuple[FakeGpu, ...] = field(
        default_factory=lambda: (
            FakeGpu(bus_id="00000000:01:00.0"),
            FakeGpu(bus_id="00000000:02:00.0"),
        )
    )
    cgroup: Literal["v1", "v2"] = "v2"
    with_uvm: bool = True
    with_modeset: bool = True

    @classmethod
    def from_json(cls, text: str) -> NodeSpec:
        """A spec from JSON overrides, e.g. ``{"with_uvm": false, "cgroup": "v1"}``."""
        data = json.loads(text)
        if "gpus" in data:
            data["gpus"] = tuple(FakeGpu(**gpu) for gpu in data["gpus"])
        return cls(**data)

    def device_nodes(self) -> list[tuple[str, int, int]]:
        """(name under /dev, major, minor) for every NVIDIA node the host has."""
        nodes = [(f"nvidia{i}", NVIDIA_MAJOR, i) for i in range(len(self.gpus))]
        nodes.append(("nvidiactl", NVIDIA_MAJOR, 255))
        if self.with_modeset:
            nodes.append(("nvidia-modeset", NVIDIA_MAJOR, 254))
        if self.with_uvm:
            nodes += [("nvidia-uvm", UVM_MAJOR, 0), ("nvidia-uvm-tools", UVM_MAJOR, 1)]
        return nodes


PVEVERSION = """#!/bin/sh
# fake pveversion (dflashops lab)
if [ "$1" = "-v" ]; then
  echo "proxmox-ve: {pve} (running kernel: {kernel})"
  echo "pve-manager: {pve} (running version: {pve}/lab)"
  echo "pve-container: 6.0.9"
else
  echo "pve-manager/{pve}/lab (running kernel: {kernel})"
fi
"""

NVIDIA_SMI = r"""#!/usr/bin/env python3
# fake nvidia-smi (dflashops lab): answers -L, --query-gpu=...--format=csv and the plain table
import json, sys
spec = json.load(open({spec_path!r}))
gpus = spec["gpus"]
args = sys.argv[1:]
fields = {{"index": lambda i, g: str(i), "name": lambda i, g: g["name"],
          "driver_version": lambda i, g: spec["driver_version"],
          "memory.total": lambda i, g: f"{{g['memory_mib']}} MiB",
          "memory.used": lambda i, g: "1 MiB",
          "pci.bus_id": lambda i, g: g["bus_id"],
          "uuid": lambda i, g: f"GPU-00000000-0000-0000-0000-00000000000{{i}}"}}
if "-L" in args:
    for i, g in enumerate(gpus):
        print(f"GPU {{i}}: {{g['name']}} (UUID: GPU-00000000-0000-0000-0000-00000000000{{i}})")
    sys.exit(0)
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
if query:
    noheader = any("noheader" in a for a in args)
    nounits = any("nounits" in a for a in args)
    keys = [k.strip() for k in query.split(",")]
    bad = [k for k in keys if k not in fields]
    if bad:
        print(f'Field "{{bad[0]}}" is not a valid field to query.', file=sys.stderr)
        sys.exit(2)
    if not noheader:
        print(", ".join(keys))
    for i, g in enumerate(gpus):
        row = [fields[k](i, g) for k in keys]
        if nounits:
            row = [v.replace(" MiB", "") for v in row]
        print(", ".join(row))
    sys.exit(0)
print("+---------------------------------------------------------------------------------------+")
print(f"| NVIDIA-SMI {{spec['driver_version']}}   Driver Version: {{spec['driver_version']}}"
      f"   CUDA Version: {{spec['cuda_version']}}  |")
for i, g in enumerate(gpus):
    print(f"|   {{i}}  {{g['name']}}  {{g['bus_id']}}  1MiB / {{g['memory_mib']}}MiB |")
"""

# pct set <vmid> -devN <value> | --devN <value> : edits the config file as pct does on a node
PCT = r"""#!/usr/bin/env python3
# fake pct (dflashops lab): supports `pct set VMID -devN VALUE ...` and `pct config VMID`
import os, re, socket, sys
args = sys.argv[1:]
if len(args) < 2 or args[0] not in ("set", "config"):
    print("usage: pct set <vmid> -devN <value> ... | pct config <vmid>", file=sys.stderr)
    sys.exit(255)
vmid = args[1]
# this node's own folder (/etc/pve/lxc links to one node's only: the cluster shares /etc/pve)
node = socket.gethostname()
path = f"/etc/pve/nodes/{node}/lxc/{vmid}.conf"
if not os.path.exists(path):
    print(f"Configuration file 'nodes/{node}/lxc/{vmid}.conf' does not exist", file=sys.stderr)
    sys.exit(2)
text = open(path).read()
head, sep, snaps = text.partition("\n[")
if args[0] == "config":
    sys.stdout.write(head if head.endswith("\n") else head + "\n")
    sys.exit(0)
lines = head.splitlines()
pairs = args[2:]
if len(pairs) % 2:
    print("400 not enough arguments", file=sys.stderr)
    sys.exit(255)
for key, value in zip(pairs[::2], pairs[1::2]):
    key = key.lstrip("-")
    if not re.fullmatch(r"dev\d+", key):
        print(f"fake pct: only devN is supported, not {key}", file=sys.stderr)
        sys.exit(255)
    dev = value.split(",")[0].removeprefix("path=")
    if not os.path.exists(dev):
        print(f"Device {dev} does not exist", file=sys.stderr)
        sys.exit(255)
    lines = [l for l in lines if not l.startswith(key + ":")]
    lines.append(f"{key}: {value}")
body = "\n".join(lines) + "\n" + (sep + snaps if sep else "")
tmp = path + ".tmp"
open(tmp, "w").write(body)
os.replace(tmp, path)
"""


def render_node_root(state_dir: Path, spec: NodeSpec) -> Path:
    """Write the fake tools under ``state_dir/node`` and return that directory."""
    root = state_dir / "node"
    sbin = root / "sbin"
    sbin.mkdir(parents=True, exist_ok=True)
    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(asdict(spec), indent=2))
    tools = {
        "pveversion": PVEVERSION.format(pve=spec.pve_version, kernel=spec.kernel),
        "nvidia-smi": NVIDIA_SMI.format(spec_path=str(spec_path)),
        "pct": PCT,
    }
    for name, text in tools.items():
        path = sbin / name
        path.write_text(text)
        path.chmod(0o755)
    return root


def node_mounts(root: Path, etc_pve: Path) -> list[Mount]:
    """The node host's private mounts: the fake tools and the double's config folder."""
    return [
        Mount.bind(root / "sbin", "/usr/local/sbin"),
        Mount.bind(etc_pve, "/etc/pve", read_only=False),
        Mount.tmpfs("/srv"),
        # a private /root: root's ~/.bashrc here runs `pyenv init`, slow and lock-taking
        Mount.tmpfs("/root"),
    ]


def node_setup_script(root: Path, spec: NodeSpec) -> str:
    """Shell run inside the running node host's mount namespace: a private ``/dev``, cgroup2.

    The real ``/dev`` is kept reachable under ``root/realdev`` for the basic nodes copied in;
    the NVIDIA nodes are made with ``mknod`` in the private tmpfs, never on this machine.
    """
    q = shlex.quote
    realdev = q(str(root / "realdev"))
    lines = [
        "set -e",
        f"mkdir -p {realdev}",
        f"mount --rbind /dev {realdev}",
        "mount -t tmpfs -o mode=0755 devtmp /dev",
        f"for d in null zero full random urandom tty; do touch /dev/$d; "
        f"mount --bind {realdev}/$d /dev/$d; done",
        "mkdir -p /dev/pts /dev/shm /dev/nvidia-caps",
        f"mount --rbind {realdev}/pts /dev/pts",
        "ln -sf pts/ptmx /dev/ptmx",
        "mount -t tmpfs -o mode=1777 shm /dev/shm",
    ]
    for name, major, minor in spec.device_nodes():
        lines.append(f"mknod -m 0666 /dev/{name} c {major} {minor}")
    if spec.cgroup == "v2":
        lines.append("mount -t cgroup2 none /sys/fs/cgroup")
    return "\n".join(lines) + "\n"
