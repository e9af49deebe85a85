"""``/nodes/{node}/lxc/...``: list, create, config (GET/PUT), pending.

Checks happen where PVE makes them: parameter and permission errors before anything else, then
synchronous ``die``s (existing vmid, lock, digest) as HTTP 500, and what PVE checks inside the
worker (template present) as a failed task.
"""

from __future__ import annotations

import base64
import binascii
import time
from pathlib import Path
from typing import Any

from dflashops.lab.pve import lxcconfig
from dflashops.lab.pve.conffile import ContainerConfig, Section
from dflashops.lab.pve.ctcommon import CT, check_lock, config_values, load, vmstatus
from dflashops.lab.pve.errors import TaskFailed, fail, param_error
from dflashops.lab.pve.formats import parse_volume_id, split_list
from dflashops.lab.pve.lxcpower import start_task
from dflashops.lab.pve.routing import Request, route
from dflashops.lab.pve.state import DoubleState
from dflashops.lab.pve.tasks import TaskLog

OSTYPES = (
    "debian", "devuan", "ubuntu", "centos", "fedora", "opensuse", "archlinux", "alpine", "gentoo",
    "nixos",
)  # fmt: skip
CREATE_ONLY = ("ignore-unpack-errors", "bwlimit", "unique", "ha-managed")


def check_ssh_keys(keys: str) -> None:
    """``PVE::Tools::validate_ssh_public_keys``: every non-empty line must be a public key."""
    for line in keys.split("\n"):
        if not line.strip():
            continue
        fields = line.split()
        kind = next((f for f in fields if f.startswith(("ssh-", "ecdsa-", "sk-"))), None)
        blob_at = fields.index(kind) + 1 if kind else len(fields)
        try:
            blob = base64.b64decode(fields[blob_at], validate=True) if kind else b""
        except (binascii.Error, IndexError):
            blob = b""
        if not kind or blob[4 : 4 + len(kind)] != kind.encode():
            raise fail("SSH public key validation error")


def ostype_of(template: str) -> str:
    name = Path(template.partition(":")[2] or template).name
    return next((os for os in OSTYPES if name.startswith(f"{os}-")), "unmanaged")


def template_exists(state: DoubleState, ostemplate: str) -> bool:
    parsed = parse_volume_id(ostemplate)
    if parsed is None:
        return Path(ostemplate).is_file()
    storage = state.storages.get(parsed[0])
    name = parsed[1].removeprefix("vztmpl/")
    return storage is not None and "vztmpl" in storage.content and name in storage.templates


@route("GET", "/nodes/{node}/lxc")
def list_containers(req: Request) -> list[dict[str, Any]]:
    req.state.check_node(req.node)
    result = []
    for vmid in req.state.configs.vmids(req.node):
        try:
            conf = req.state.configs.load(req.node, vmid)
        except Exception:  # removed between listing and reading
            continue
        result.append(vmstatus(req.state, vmid, conf))
    return result


@route("POST", "/nodes/{node}/lxc")
def create(req: Request) -> str:
    state, node, vmid = req.state, req.node, req.vmid
    state.check_node(node)
    params = {k: v for k, v in req.params.items() if k not in ("node", "vmid", *CREATE_ONLY)}
    start_after = bool(params.pop("start", 0))
    unprivileged = params.pop("unprivileged", 1)  # create defaults to unprivileged=1
    if params.pop("restore", 0) or params.pop("force", 0):
        raise fail("restore/force are not supported by the dflashops PVE double")
    existing = state.configs.node_of(vmid)
    if existing:
        raise fail(f"CT {vmid} already exists on node '{existing}'")
    params.pop("password", None)
    ssh_keys = params.pop("ssh-public-keys", None)
    if ssh_keys is not None:
        check_ssh_keys(ssh_keys)
    pool = params.pop("pool", None)
    if pool:
        raise fail(f"pool '{pool}' does not exist")
    ostemplate = str(params.pop("ostemplate"))
    storage = str(params.pop("storage", "local"))
    lxcconfig.check_modify_perm(state, req.caller, params, [], bool(unprivileged))
    if parse_volume_id(ostemplate) is None:
        if not ostemplate.startswith("/"):
            raise fail(f"unable to parse volume ID '{ostemplate}'")
        if not req.caller.is_root_pam:
            raise fail("Only root can pass arbitrary filesystem paths.")
    mounts = _mount_params(req, params, storage)
    for key in [k for k in params if k.startswith("unused")]:
        del params[key]  # PVE: "ignoring 'unusedN', cannot create/restore with unused volume"
    staged = ContainerConfig()
    lxcconfig.stage_changes(
        state, vmid, staged, params={**params, **mounts}, deletes=[], reverts=[]
    )
    with state.configs.locked(vmid):
        if state.configs.node_of(vmid):
            raise fail(f"unable to create CT {vmid} - CT {vmid} already exists on node '{node}'")
        state.configs.save(node, vmid, ContainerConfig(main=Section({"lock": "create"})))

    def worker(log: TaskLog) -> None:
        _create_worker(
            req, staged.pending, ostemplate=ostemplate, ssh_keys=ssh_keys,
            unprivileged=bool(unprivileged), log=log,
        )  # fmt: skip
        if start_after:
            start_task(req)

    return state.tasks.spawn(node, "vzcreate", str(vmid), req.caller, worker).upid


def _mount_params(req: Request, params: dict[str, Any], storage: str) -> dict[str, str]:
    """rootfs/mpN of a create call, checked like ``create_vm`` does before forking."""
    state = req.state
    mounts: dict[str, str] = {}
    for key in [k for k in params if lxcconfig.MOUNT_KEY.fullmatch(k)]:
        value = str(params.pop(key))
        mounts[key] = f"{storage}:{value}" if value.replace(".", "", 1).isdigit() else value
    if mounts and "rootfs" not in mounts:
        raise fail("mount points configured, but 'rootfs' not set - aborting")
    for key, value in mounts.items():
        mountpoint = lxcconfig.parse_mountpoint(state, key, value)
        if mountpoint["type"] != "volume":
            if not req.caller.is_root_pam:
                raise fail("Only root can pass arbitrary filesystem paths.")
            continue
        parsed = parse_volume_id(mountpoint["volume"])
        if parsed is None:
            raise fail(f"unable to parse volume ID '{mountpoint['volume']}'")
        lxcconfig.check_storage_for_rootdir(state, parsed[0])
    if "rootfs" not in mounts:
        lxcconfig.check_storage_for_rootdir(state, storage)
        mounts["rootfs"] = f"{storage}:4"  # PVE's default root disk: 4 GiB on the default storage
    return mounts


def _create_worker(
    req: Request,
    staged: Section,
    *,
    ostemplate: str,
    ssh_keys: str | None,
    unprivileged: bool,
    log: TaskLog,
) -> None:
    state, node, vmid = req.state, req.node, req.vmid
    delay = state.settings.create_delay
    try:
        time.sleep(delay / 2)
        with state.configs.locked(vmid):
            if not template_exists(state, ostemplate):
                raise TaskFailed(f"volume '{ostemplate}' does not exist")
            conf = state.configs.load(node, vmid)
            conf.pending = staged
            lxcconfig.apply_pending(state, vmid, conf, running=False)
            values = conf.main.values
            values.setdefault("arch", "amd64")
            values.setdefault("ostype", ostype_of(ostemplate))
            values.setdefault("hostname", f"CT{vmid}")
            values.setdefault("memory", "512")
            values.setdefault("swap", "512")
            if unprivileged:
                values["unprivileged"] = "1"
            log(f"extracting archive '{ostemplate}'")
            log("Total bytes read: 536862720 (512MiB, 283MiB/s)")
            log(f"Detected container architecture: {values['arch']}")
            state.configs.save(node, vmid, conf)
            if state.settings.backend is not None:
                state.settings.backend.on_create(vmid, ssh_keys)
            if ssh_keys:
                log("Setting up SSH keys for root")
        time.sleep(delay / 2)
        with state.configs.locked(vmid):
            conf = state.configs.load(node, vmid)
            conf.main.values.pop("lock", None)
            state.configs.save(node, vmid, conf)
    except Exception as exc:
        state.configs.remove(node, vmid)  # PVE removes the config it made
        raise TaskFailed(f"unable to create CT {vmid} - {exc}") from exc


@route("GET", CT)
def container_index(req: Request) -> list[dict[str, str]]:
    load(req)
    subdirs = ["config", "pending", "status", "interfaces", "snapshot", "firewall", "rrd"]
    return [{"subdir": name} for name in subdirs]


@route("GET", CT + "/config")
def get_config(req: Request) -> dict[str, Any]:
    conf = load(req)
    snapshot = req.params.get("snapshot")
    if snapshot:
        section = conf.snapshots.get(str(snapshot))
        if section is None:
            raise fail(f"snapshot '{snapshot}' does not exist")
        values = dict(section.values)
        lxc = section.lxc
    else:
        values = dict(conf.main.values)
        lxc = conf.main.lxc
        if not req.params.get("current"):
            pending = conf.pending.values
            values.update({k: v for k, v in pending.items() if k != "delete"})
            for key in split_list(pending.get("delete", "")):
                values.pop(key.lstrip("!"), None)
    result = config_values(req.state, Section(values))
    result["digest"] = conf.digest
    if lxc:
        result["lxc"] = [[key, value] for key, value in lxc]
    return result


@route("GET", CT + "/pending")
def get_pending(req: Request) -> list[dict[str, Any]]:
    conf = load(req)
    current = config_values(req.state, conf.main)
    pending = config_values(req.state, Section(dict(conf.pending.values)))
    deletes = {key.lstrip("!") for key in split_list(str(pending.pop("delete", "")))}
    result = []
    for key in sorted(set(current) | set(pending) | deletes):
        item: dict[str, Any] = {"key": key}
        if key in current:
            item["value"] = current[key]
        if key in pending:
            item["pending"] = pending[key]
        if key in deletes:
            item["delete"] = 1
        result.append(item)
    return result


@route("PUT", CT + "/config")
def update_config(req: Request) -> None:
    state, node, vmid = req.state, req.node, req.vmid
    state.check_node(node)
    params = {k: v for k, v in req.params.items() if k not in ("node", "vmid")}
    digest = params.pop("digest", None)
    deletes = split_list(str(params.pop("delete", "")))
    reverts = split_list(str(params.pop("revert", "")))
    if not params and not deletes and not reverts:
        raise fail("no options specified")
    for key in deletes:
        if key in params:
            raise param_error(
                {"delete": f"you can't use '-{key}' and -delete {key}' at the same time"}
            )
        if state.configs.schema_of(key) is None:
            raise param_error({"delete": f"unknown option '{key}'"})
    lxcconfig.check_modify_perm(state, req.caller, params, deletes, unprivileged=True)
    with state.configs.locked(vmid):
        conf = state.configs.load(node, vmid)
        check_lock(conf)
        if digest and digest != conf.digest:
            raise fail("detected modified configuration - file changed by other user? Try again.")
        unprivileged = conf.main.values.get("unprivileged") == "1"
        lxcconfig.check_modify_perm(state, req.caller, params, deletes, unprivileged)
        lxcconfig.stage_changes(state, vmid, conf, params=params, deletes=deletes, reverts=reverts)
        lxcconfig.apply_pending(state, vmid, conf, state.runtime_of(vmid).running)
        state.configs.save(node, vmid, conf)
