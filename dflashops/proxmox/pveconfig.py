"""Container options as PVE spells them: the wanted values, property strings, sizes, hotplug.

Pure functions shared by the create and change plans (and by ``status``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dflashops.inventory.models import MANAGED_TAG, Container
from dflashops.proxmox.client import version_tuple

# options PVE applies to a running container at once (vmconfig_hotplug_pending); others wait for
# the next start. New mpN/devN are hot-plugged too, changed ones are not.
HOTPLUG = frozenset(
    ("description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags")
) | {"memory", "swap", "cpulimit", "cpuunits"}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGT]?)")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def net0(ct: Container) -> dict[str, str]:
    net = {"name": "eth0", "bridge": ct.network.bridge, "ip": ct.network.ip}
    if ct.network.gateway:
        net["gw"] = ct.network.gateway
    if ct.network.vlan:
        net["tag"] = str(ct.network.vlan)
    return net


def mount_value(host_path: str, path: str, read_only: bool) -> str:
    return f"{host_path},mp={path}" + (",ro=1" if read_only else "")


def wanted_basics(ct: Container) -> dict[str, str]:
    """Options every managed container has, as PVE spells them (create and compare)."""
    values = {
        "hostname": ct.name,
        "cores": str(ct.cores),
        "memory": str(ct.memory_mb),
        "swap": str(ct.swap_mb),
        "net0": render_props(net0(ct)),
        "features": "nesting=1",
        "onboot": "1" if ct.onboot else "0",
        "tags": MANAGED_TAG,
    }
    if ct.nameserver:
        values["nameserver"] = ct.nameserver
    return values


def parse_props(value: str, default_key: str | None = None) -> dict[str, str]:
    """A PVE property string (``a=1,b=2``; a leading bare item is ``default_key``)."""
    props: dict[str, str] = {}
    for index, part in enumerate(value.split(",")):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep and index == 0 and default_key:
            props[default_key] = part
        else:
            props[key.strip()] = val.strip()
    return props


def render_props(props: Mapping[str, str], default_key: str | None = None) -> str:
    parts = []
    if default_key and default_key in props:
        parts.append(props[default_key])
    parts += [f"{k}={v}" for k, v in props.items() if k != default_key]
    return ",".join(parts)


def size_gib(text: str) -> float | None:
    """A PVE size (``8G``, ``512M``, a bare number of bytes) in GiB."""
    match = _SIZE.fullmatch(text.strip().upper())
    if not match:
        return None
    return float(match.group(1)) * _UNITS[match.group(2)] / (1 << 30)


def as_text(value: Any) -> str:
    """A config value as text (absent keys are empty)."""
    return "" if value is None else str(value)


def pve_supports_interfaces(version: str) -> bool:
    """``GET .../interfaces`` exists from pve-container 5.0.6 (PVE 8.1)."""
    return version_tuple(version) >= (8, 1)
