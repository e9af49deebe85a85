"""Helpers shared by the container endpoints: loading configs, status, typed values, NICs."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Mapping
from typing import Any

from dflashops.lab.pve import lxcconfig
from dflashops.lab.pve.conffile import ContainerConfig, Section
from dflashops.lab.pve.errors import fail
from dflashops.lab.pve.formats import parse_size
from dflashops.lab.pve.routing import Request
from dflashops.lab.pve.state import DoubleState
from dflashops.lab.pve.validate import parse_property_string, typed_value

CT = "/nodes/{node}/lxc/{vmid}"
MIB = 1 << 20


def check_lock(conf: ContainerConfig) -> None:
    lock = conf.main.values.get("lock")
    if lock:
        raise fail(f"CT is locked ({lock})")


def config_values(state: DoubleState, section: Section) -> dict[str, Any]:
    """Config values with the JSON types PVE returns (integers and booleans as numbers)."""
    result: dict[str, Any] = {}
    for key, value in section.values.items():
        try:
            result[key] = typed_value(state.configs.schema_of(key), value)
        except ValueError:  # a hand-edited file may hold anything
            result[key] = value
    return result


def load(req: Request) -> ContainerConfig:
    req.state.check_node(req.node)
    return req.state.configs.load(req.node, req.vmid)


def vmstatus(state: DoubleState, vmid: int, conf: ContainerConfig) -> dict[str, Any]:
    values = conf.main.values
    runtime = state.runtime_of(vmid)
    rootfs = values.get("rootfs", "")
    size = parse_size(dict(p.partition("=")[::2] for p in rootfs.split(",")).get("size", "0")) or 0
    cores = values.get("cores") or values.get("cpulimit")
    data: dict[str, Any] = {
        "vmid": vmid,
        "name": values.get("hostname", f"CT{vmid}"),
        "type": "lxc",
        "status": "running" if runtime.running else "stopped",
        "uptime": int(time.time() - runtime.started) if runtime.running else 0,
        "cpus": float(cores) if cores else state.settings.node_cpus,
        "maxmem": int(values.get("memory", "512")) * MIB,
        "maxswap": int(values.get("swap", "512")) * MIB,
        "maxdisk": size,
        "mem": 48 * MIB if runtime.running else 0,
        "swap": 0,
        "disk": size // 20 if runtime.running else 0,
        "cpu": 0,
        "netin": 0,
        "netout": 0,
        "diskread": 0,
        "diskwrite": 0,
    }
    for key in ("lock", "tags"):
        if values.get(key):
            data[key] = values[key]
    if values.get("template") == "1":
        data["template"] = 1
    if runtime.running:
        data["pid"] = 100000 + vmid
    return data


def interface_entry(name: str, hwaddr: str, addresses: list[str]) -> dict[str, Any]:
    """One item of ``GET .../interfaces`` (addresses as ``ip/prefix``)."""
    entry: dict[str, Any] = {"name": name, "hwaddr": hwaddr, "hardware-address": hwaddr}
    items = []
    for text in addresses:
        iface = ipaddress.ip_interface(text)
        family = "inet" if iface.version == 4 else "inet6"
        entry.setdefault(family, text)
        items.append(
            {
                "ip-address": str(iface.ip),
                "ip-address-type": family,
                "prefix": iface.network.prefixlen,
            }
        )
    entry["ip-addresses"] = items
    return entry


def interfaces_from_config(state: DoubleState, values: Mapping[str, str]) -> list[dict[str, Any]]:
    result = [interface_entry("lo", "00:00:00:00:00:00", ["127.0.0.1/8", "::1/128"])]
    for key in sorted(k for k in values if k.startswith("net") and k[3:].isdigit()):
        net = parse_property_string(lxcconfig.property_format(state, key), values[key], key)
        ip = net.get("ip", "")
        result.append(
            interface_entry(net["name"], net.get("hwaddr", ""), [ip] if "/" in ip else [])
        )
    return result
