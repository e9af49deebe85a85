"""GPU passthrough: which host device nodes a container gets, and how it gets them.

Three ways, chosen per container (``passthrough: auto|devN|raw``) and by the node's facts:

- ``devN`` entries through the API (PVE >= 8.1, logged in as root@pam with a password);
- the same ``devN`` entries by ``pct set <vmid> -devN ...`` over SSH on the node (an API token,
  even root@pam's, may not set them);
- raw ``lxc.*`` lines written into ``/etc/pve/nodes/<node>/lxc/<vmid>.conf`` over SSH (any PVE;
  the API cannot write them): one device-cgroup allow per major (``lxc.cgroup2.*`` on a cgroup v2
  host, ``lxc.cgroup.*`` on v1) and one ``optional`` bind mount per node.

``auto`` is devN on PVE >= 8.1 and raw lines before. Missing ``/dev/nvidia-uvm`` is refused up
front: with devN the container would not start (``Device /dev/nvidia-uvm does not exist``), with
raw lines CUDA would fail inside; the plan names the host-side fix instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dflashops.inventory.models import Container
from dflashops.proxmox.facts import NVIDIA_MAJOR, UVM_FIX, UVM_NODES, HostFacts
from dflashops.proxmox.rows import Row

Method = Literal["none", "devN-api", "devN-pct", "raw"]
DEV_MODE = "0666"
RawLine = tuple[str, str]
_DEV_KEY = re.compile(r"dev(\d+)")
_MANAGED_DEV = re.compile(r"^/dev/nvidia")
_ALLOW = re.compile(r"lxc\.cgroup2?\.devices\.allow")


@dataclass(frozen=True)
class PassthroughPlan:
    """What the container should get; ``issues`` non-empty means: do not provision it."""

    method: Method
    devices: tuple[str, ...] = ()
    refused: tuple[str, ...] = ()  # wanted nodes the host lacks (shown, never passed)
    devn: tuple[tuple[str, str], ...] = ()  # (path, full devN value)
    raw_lines: tuple[RawLine, ...] = ()
    issues: tuple[str, ...] = ()
    host_fixes: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def via(self) -> str:
        return {"devN-api": "api", "devN-pct": "pct set", "raw": "ssh conf"}.get(self.method, "")


def refused_device_rows(pt: PassthroughPlan) -> list[Row]:
    """One plan row per wanted device node the host lacks."""
    return [
        Row(field="device", wanted=path, status="refused", note="missing on the node")
        for path in pt.refused
    ]


def gpu_indices(ct: Container, host: HostFacts) -> list[int]:
    if ct.gpus == "all":
        return [gpu.index for gpu in host.gpus]
    return list(ct.gpus)


@dataclass
class _Wanted:
    paths: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)


def wanted_devices(ct: Container, host: HostFacts) -> _Wanted:
    """Device paths for the container's GPUs; absent required ones are refused with issues."""
    wanted = _Wanted()
    issues, fixes, paths = wanted.issues, wanted.fixes, wanted.paths
    if host.nvidia_error and not host.gpus:
        issues.append(f"node {host.node}: {host.nvidia_error}")
        fixes.append("install the NVIDIA driver on the node first (containers get its version)")
        return wanted
    indices = gpu_indices(ct, host)
    known = {gpu.index for gpu in host.gpus}
    missing_gpus = [i for i in indices if host.gpus and i not in known]
    if missing_gpus:
        have = ", ".join(str(i) for i in sorted(known)) or "none"
        issues.append(f"GPU {missing_gpus} not on node {host.node} (it has {have})")
    required = [f"/dev/nvidia{index}" for index in indices]
    for path in [*required, "/dev/nvidiactl"]:
        if host.device(path) is None:
            issues.append(f"{path} does not exist on node {host.node}")
            wanted.refused.append(path)
        else:
            paths.append(path)
    absent = [p for p in UVM_NODES if host.device(p) is None]
    paths += [p for p in UVM_NODES if p not in absent]
    if absent:
        issues.append(f"{', '.join(absent)} missing on node {host.node} (CUDA needs it)")
        fixes.append(UVM_FIX)
        wanted.refused += absent
    if host.device("/dev/nvidia-modeset") is not None:
        paths.append("/dev/nvidia-modeset")
    paths += [cap.path for cap in host.caps]
    return wanted


def choose_method(ct: Container, host: HostFacts, *, can_set_devices: bool) -> tuple[Method, str]:
    """The passthrough method, or ("none", reason) when the wanted one cannot work here."""
    supports = host.supports_devn()
    if ct.passthrough == "raw" or (ct.passthrough == "auto" and not supports):
        return "raw", ""
    if not supports:
        return "none", (
            f"passthrough: devN needs PVE >= 8.1; node {host.node} runs "
            f"{host.pve_version or 'an unknown version'} (use passthrough: raw)"
        )
    return ("devN-api" if can_set_devices else "devN-pct"), ""


def plan_passthrough(
    ct: Container, host: HostFacts | None, *, can_set_devices: bool
) -> PassthroughPlan:
    if not ct.gpus:
        return PassthroughPlan("none")
    if host is None:
        return PassthroughPlan("none", issues=("GPUs wanted but the node was not probed",))
    method, refusal = choose_method(ct, host, can_set_devices=can_set_devices)
    wanted = wanted_devices(ct, host)
    paths, issues, fixes = wanted.paths, wanted.issues, wanted.fixes
    if refusal:
        issues.insert(0, refusal)
    notes: list[str] = []
    if method == "devN-pct":
        notes.append("API token: devN is root@pam-only, so `pct set` runs over SSH on the node")
    if method == "raw":
        return PassthroughPlan(
            method,
            devices=tuple(paths),
            refused=tuple(wanted.refused),
            raw_lines=tuple(raw_lines(host, paths)),
            issues=tuple(issues),
            host_fixes=tuple(fixes),
            notes=tuple(notes),
        )
    return PassthroughPlan(
        method,
        devices=tuple(paths),
        refused=tuple(wanted.refused),
        devn=tuple((path, f"{path},mode={DEV_MODE}") for path in paths),
        issues=tuple(issues),
        host_fixes=tuple(fixes),
        notes=tuple(notes),
    )


# --------------------------------------------------------------------------- raw lxc lines


def cgroup_key(host: HostFacts) -> str:
    return "lxc.cgroup2.devices.allow" if host.cgroup == "v2" else "lxc.cgroup.devices.allow"


def raw_lines(host: HostFacts, paths: Sequence[str]) -> list[RawLine]:
    """Device-cgroup allows (one per major, read from the host: nvidia-uvm's is dynamic) and
    one optional bind mount per device node, in PVE's ``key: value`` sense."""
    majors: list[int] = []
    for path in paths:
        node = host.device(path)
        major = node.major if node is not None else NVIDIA_MAJOR
        if major not in majors:
            majors.append(major)
    key = cgroup_key(host)
    lines: list[RawLine] = [(key, f"c {major}:* rwm") for major in majors]
    for path in paths:
        lines.append(("lxc.mount.entry", f"{path} {path[1:]} none bind,optional,create=file"))
    return lines


def is_managed_raw(line: RawLine, host: HostFacts | None) -> bool:
    """Raw lines dflashops owns: NVIDIA bind mounts, and whole-major allows for a major that
    NVIDIA holds now or that no driver holds any more (nvidia-uvm's major before a reboot)."""
    key, value = line
    if key == "lxc.mount.entry":
        return value.startswith("/dev/nvidia")
    match = re.fullmatch(r"c (\d+):\* rwm", value.strip())
    if not _ALLOW.fullmatch(key) or match is None:
        return False
    major = int(match.group(1))
    if host is None:
        return major == NVIDIA_MAJOR
    return major in host.nvidia_majors() or (
        bool(host.char_majors) and major not in host.char_majors
    )


def raw_changes(
    wanted: Sequence[RawLine], actual: Sequence[RawLine], host: HostFacts | None
) -> tuple[list[RawLine], list[RawLine]]:
    """(lines to add, managed lines to remove) so that the file holds exactly ``wanted``."""
    have = [(k, v.strip()) for k, v in actual]
    add = [line for line in wanted if line not in have]
    remove = [line for line in have if line not in wanted and is_managed_raw(line, host)]
    return add, remove


def as_lxc_config(lines: Sequence[RawLine]) -> str:
    """The lines in plain LXC syntax (``key = value``; PVE's files use ``key: value``)."""
    return "".join(f"{key} = {value}\n" for key, value in lines)


def edit_conf_text(text: str, add: Sequence[str], remove: Sequence[str]) -> str:
    """A PVE container config with ``remove`` lines dropped and ``add`` lines inserted.

    Both only touch the main section: new lines go before the first ``[section]`` (pending
    changes, snapshots), since appending would put them into the last snapshot.
    """
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    first_section = next((i for i, line in enumerate(lines) if line.startswith("[")), len(lines))
    main, rest = lines[:first_section], lines[first_section:]
    dropped = {line.strip() for line in remove}
    main = [line for line in main if line.strip() not in dropped]
    present = {line.strip() for line in main}
    new = [line for line in add if line.strip() not in present]
    while main and not main[-1].strip():
        main.pop()
    body = main + new
    if rest:
        body += ["", *rest] if rest[0].strip() else rest
    return "\n".join(body) + "\n"


# --------------------------------------------------------------------------- devN entries


def parse_devn(config: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """``{devN key: (path, value)}`` of a config."""
    found = {}
    for key, value in config.items():
        if _DEV_KEY.fullmatch(key):
            text = str(value)
            first = text.split(",", 1)[0]
            found[key] = (first.removeprefix("path="), text)
    return found


def devn_changes(
    wanted: Sequence[tuple[str, str]], config: Mapping[str, Any]
) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """(keys to set, NVIDIA keys to delete, unchanged keys) for the wanted (path, value) list.

    Entries keep their index when the path is already passed; new ones take the lowest free
    index; devN entries that are not NVIDIA's (``/dev/net/tun``, ...) are left alone.
    """
    actual = parse_devn(config)
    by_path = {path: key for key, (path, _value) in actual.items()}
    used = set(actual)
    to_set: dict[str, str] = {}
    unchanged: dict[str, str] = {}
    for path, value in wanted:
        key = by_path.get(path)
        if key is None:
            key = next(f"dev{i}" for i in range(256) if f"dev{i}" not in used)
            used.add(key)
            to_set[key] = value
        elif _normalise(actual[key][1]) != _normalise(value):
            to_set[key] = value
        else:
            unchanged[key] = value
    wanted_paths = {path for path, _ in wanted}
    delete = sorted(
        (
            key
            for key, (path, _v) in actual.items()
            if _MANAGED_DEV.match(path) and path not in wanted_paths
        ),
        key=_dev_index,
    )
    return to_set, delete, unchanged


def _normalise(value: str) -> tuple[str, ...]:
    parts = value.split(",")
    first = parts[0].removeprefix("path=")
    return (first, *sorted(parts[1:]))


def _dev_index(key: str) -> int:
    match = _DEV_KEY.fullmatch(key)
    return int(match.group(1)) if match else 0
