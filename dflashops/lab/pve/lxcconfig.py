"""Changing a container config the way pve-container does (create, ``PUT config``, start).

Covers ``check_ct_modify_config_perm`` (root@pam-only options), ``update_pct_config`` (changes go
to ``[pve:pending]`` first), ``vmconfig_apply_pending`` (stopped containers) and a reduced
``vmconfig_hotplug_pending`` (running ones: options PVE hot-plugs apply at once, the rest stay
pending until the next start), new volumes from ``STORAGE:SIZE_IN_GiB`` and normalised ``netN``
and ``tags`` values.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from dflashops.lab.pve.auth import Caller
from dflashops.lab.pve.conffile import ContainerConfig, Section
from dflashops.lab.pve.errors import fail, param_error, perm_error
from dflashops.lab.pve.formats import format_size, parse_volume_id, split_list
from dflashops.lab.pve.state import DoubleState
from dflashops.lab.pve.validate import parse_property_string, print_property_string

NEW_DISK = re.compile(r"([^:\s]+):(\d+(\.\d+)?)")
MAC_PREFIX = "BC:24:11"  # PVE's default datacenter mac_prefix
REQUIRED_OPTIONS = ("memory", "rootfs", "ostype")
FASTPLUG = frozenset(
    ("description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags")
) | {"lock"}
HOTPLUG = FASTPLUG | {"memory", "swap", "cpulimit", "cpuunits"}
MOUNT_KEY = re.compile(r"rootfs|mp\d+")


def is_dev_key(key: str) -> bool:
    return re.fullmatch(r"dev\d+", key) is not None


def property_format(state: DoubleState, key: str) -> Mapping[str, Any]:
    schema = state.configs.schema_of(key) or {}
    fmt = schema.get("format")
    return fmt if isinstance(fmt, Mapping) else {}


def parse_mountpoint(state: DoubleState, key: str, value: str) -> dict[str, str]:
    parsed = parse_property_string(property_format(state, key), value, key)
    volume = parsed.get("volume", "")
    parsed["type"] = (
        ("device" if volume.startswith("/dev/") else "bind") if volume.startswith("/") else "volume"
    )
    return parsed


def check_modify_perm(
    state: DoubleState,
    caller: Caller,
    params: Mapping[str, Any],
    deletes: Sequence[str],
    unprivileged: bool,
) -> None:
    """Options only root@pam (with a password, not a token) may set, as PVE checks them."""
    if caller.is_root_pam:
        return
    for key in [*params, *deletes]:
        if is_dev_key(key):
            raise perm_error("configuring device passthrough is only allowed for root@pam")
        if key == "hookscript":
            raise perm_error("changing the hookscript is only allowed for root@pam")
        if key == "features" and key in params:
            if not unprivileged:
                raise perm_error(
                    "changing feature flags for privileged container is only allowed for root@pam"
                )
            flags = parse_property_string(property_format(state, key), str(params[key]), key)
            if set(flags) - {"nesting"}:
                raise perm_error(
                    "changing feature flags (except nesting) is only allowed for root@pam"
                )
        if MOUNT_KEY.fullmatch(key) and key in params:
            kind = parse_mountpoint(state, key, str(params[key]))["type"]
            if kind != "volume":
                raise perm_error(f"mount point type {kind} is only allowed for root@pam")


def unique_tags(value: str) -> str:
    """``PVE::GuestHelpers::get_unique_tags`` with the default tag style: sorted, lower-case."""
    seen: dict[str, None] = {}
    for tag in sorted(split_list(value), key=str.lower):
        seen.setdefault(tag.lower(), None)
    return ";".join(seen)


def normalize_net(state: DoubleState, key: str, value: str) -> str:
    net = parse_property_string(property_format(state, key), value, key)
    net["type"] = "veth"
    if not net.get("hwaddr"):
        octets = ":".join(f"{byte:02X}" for byte in secrets.token_bytes(3))
        net["hwaddr"] = f"{MAC_PREFIX}:{octets}"
    return print_property_string(net, property_format(state, key))


def check_storage_for_rootdir(state: DoubleState, storage_id: str) -> None:
    if "rootdir" not in state.storage(storage_id).content:
        raise param_error(
            {"storage": f"storage '{storage_id}' does not support container directories"}
        )


def allocate_volume(
    state: DoubleState, vmid: int, conf: ContainerConfig, key: str, value: str
) -> str:
    """Turn ``STORAGE:SIZE`` into a new volume, as ``create_disks`` does; keep others as given."""
    mountpoint = parse_mountpoint(state, key, value)
    match = NEW_DISK.fullmatch(mountpoint.get("volume", ""))
    if mountpoint["type"] != "volume" or not match:
        return value
    storage = state.storage(match.group(1))
    used = " ".join(
        [*conf.main.values.values(), *conf.pending.values.values()]
        + [v for snap in conf.snapshots.values() for v in snap.values.values()]
    )
    index = 0
    while f"vm-{vmid}-disk-{index}" in used:
        index += 1
    name = f"vm-{vmid}-disk-{index}"
    volname = name if storage.type != "dir" else f"{vmid}/{name}.raw"
    mountpoint["volume"] = f"{storage.name}:{volname}"
    mountpoint["size"] = format_size(int(float(match.group(2)) * (1 << 30)))
    del mountpoint["type"]
    return print_property_string(
        mountpoint, property_format(state, key), ("mp",) if key == "rootfs" else ()
    )


def check_device(state: DoubleState, key: str, value: str) -> None:
    device = parse_property_string(property_format(state, key), value, key)
    path = device.get("path")
    if path is None:
        raise fail(f"Path is not defined for passthrough device {key}")
    exists = state.settings.device_exists
    if exists is not None and not exists(path):
        raise fail(f"Device {path} does not exist")


def _pending_deletes(section: Section) -> list[str]:
    return [item.lstrip("!") for item in split_list(section.values.get("delete", ""))]


def _set_pending_deletes(section: Section, keys: Sequence[str]) -> None:
    if keys:
        section.values["delete"] = ",".join(dict.fromkeys(keys))
    else:
        section.values.pop("delete", None)


def stage_changes(
    state: DoubleState,
    vmid: int,
    conf: ContainerConfig,
    *,
    params: Mapping[str, Any],
    deletes: Sequence[str],
    reverts: Sequence[str],
) -> None:
    """``update_pct_config``: check each change and write it to the pending section."""
    main, pending = conf.main, conf.pending
    pending_deletes = [key for key in _pending_deletes(pending) if key not in reverts]
    for key in reverts:
        pending.values.pop(key, None)
    for key in deletes:
        if key not in main.values and key not in pending.values:
            continue  # PVE only warns: "cannot delete '<key>' - not set in current configuration!"
        if key in REQUIRED_OPTIONS:
            raise fail(f"unable to delete required option '{key}'")
        if key == "unprivileged":
            raise fail(f"unable to delete read-only option: '{key}'")
        if re.fullmatch(r"mp\d+|unused\d+", key) and main.values.get("protection") == "1":
            raise fail(f"can't remove CT {vmid} drive '{key}' - protection mode enabled")
        pending_deletes.append(key)
    for key in sorted(params):
        value = str(params[key])
        if MOUNT_KEY.fullmatch(key):
            if main.values.get("protection") == "1":
                raise fail(f"can't update CT {vmid} drive '{key}' - protection mode enabled")
            mountpoint = parse_mountpoint(state, key, value)
            if mountpoint["type"] == "volume":
                parsed = parse_volume_id(mountpoint["volume"])
                if parsed is None:
                    raise fail(f"unable to parse volume ID '{mountpoint['volume']}'")
                if "rootdir" not in state.storage(parsed[0]).content:
                    raise fail(
                        f"storage '{parsed[0]}' does not allow content type 'rootdir' (Container)"
                    )
        elif key == "unprivileged":
            raise fail(f"unable to modify read-only option: '{key}'")
        elif key == "tags":
            value = unique_tags(value)
        elif is_dev_key(key):
            check_device(state, key, value)
        pending.values[key] = value
        pending_deletes = [item for item in pending_deletes if item != key]
    _set_pending_deletes(pending, pending_deletes)


def _hot_deletable(key: str) -> bool:
    return key in HOTPLUG or re.fullmatch(r"net\d+|unused\d+", key) is not None


def _hot_pluggable(key: str, *, exists: bool) -> bool:
    """What ``vmconfig_hotplug_pending`` applies to a running CT: new mp/dev, not changed ones."""
    if key in HOTPLUG or re.fullmatch(r"net\d+", key):
        return True
    return (re.fullmatch(r"mp\d+", key) is not None or is_dev_key(key)) and not exists


def apply_pending(state: DoubleState, vmid: int, conf: ContainerConfig, running: bool) -> None:
    """Move pending changes into the config: all of them when stopped, hot-pluggable ones else."""
    main, pending = conf.main, conf.pending
    kept_deletes = []
    for key in _pending_deletes(pending):
        if running and not _hot_deletable(key):
            kept_deletes.append(key)
            continue
        old = main.values.pop(key, None)
        if old is not None and re.fullmatch(r"mp\d+", key):
            _add_unused(state, conf, key, old)
    _set_pending_deletes(pending, kept_deletes)
    for key in sorted(pending.values):
        if key == "delete":
            continue
        value = pending.values[key]
        if running and not _hot_pluggable(key, exists=key in main.values):
            continue
        old = main.values.get(key)
        if re.fullmatch(r"net\d+", key):
            value = normalize_net(state, key, value)
        elif MOUNT_KEY.fullmatch(key):
            value = allocate_volume(state, vmid, conf, key, value)
        main.values[key] = value
        del pending.values[key]
        if old is not None and old != value and MOUNT_KEY.fullmatch(key):
            _add_unused(state, conf, key, old)


def _add_unused(state: DoubleState, conf: ContainerConfig, key: str, old: str) -> None:
    mountpoint = parse_mountpoint(state, key, old)
    if mountpoint["type"] != "volume":
        return
    volume = mountpoint["volume"]
    if any(volume in value for k, value in conf.main.values.items() if MOUNT_KEY.fullmatch(k)):
        return
    index = 0
    while f"unused{index}" in conf.main.values:
        index += 1
    conf.main.values[f"unused{index}"] = volume
