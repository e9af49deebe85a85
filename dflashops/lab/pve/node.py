"""Everything outside ``/lxc``: login, version, nodes, cluster, storage, templates, tasks."""

from __future__ import annotations

import time
from typing import Any

from dflashops.lab.pve.ctcommon import vmstatus
from dflashops.lab.pve.errors import ApiError, fail, param_error
from dflashops.lab.pve.formats import FormatError, parse_size, parse_volume_id
from dflashops.lab.pve.lxcconfig import MOUNT_KEY, parse_mountpoint
from dflashops.lab.pve.routing import Request, route
from dflashops.lab.pve.state import DoubleState
from dflashops.lab.pve.tasks import Task, TaskLog

MIN_VMID, MAX_VMID = 100, 1_000_000


@route("GET", "/access/ticket")
def ticket_dummy(req: Request) -> None:
    return None


@route("POST", "/access/ticket")
def login(req: Request) -> dict[str, Any]:
    return req.state.authenticator.login(
        str(req.params["username"]), str(req.params["password"]), req.params.get("realm")
    )


@route("GET", "/version")
def version(req: Request) -> dict[str, Any]:
    release = ".".join(req.state.settings.pve_version.split(".")[:2])
    return {
        "version": req.state.settings.pve_version,
        "release": release,
        "repoid": "dflashopslab",
        "console": "xtermjs",
    }


def _node_info(state: DoubleState, node: str) -> dict[str, Any]:
    settings = state.settings
    return {
        "node": node,
        "id": f"node/{node}",
        "type": "node",
        "status": "online",
        "level": "",
        "maxcpu": settings.node_cpus,
        "cpu": 0.01,
        "maxmem": settings.node_memory,
        "mem": settings.node_memory // 8,
        "maxdisk": 100 << 30,
        "disk": 10 << 30,
        "uptime": int(time.time() - state.started),
        "ssl_fingerprint": "",
    }


@route("GET", "/nodes")
def nodes(req: Request) -> list[dict[str, Any]]:
    return [_node_info(req.state, node) for node in req.state.settings.nodes]


@route("GET", "/cluster/nextid")
def nextid(req: Request) -> str:
    taken = req.state.configs.all_vmids()
    wanted = req.params.get("vmid")
    if wanted is not None:
        if int(wanted) in taken:
            raise param_error({"vmid": f"VM {wanted} already exists"})
        return str(wanted)
    # PVE returns the id as a JSON string
    return str(next(vmid for vmid in range(MIN_VMID, MAX_VMID) if vmid not in taken))


def _storage_used(state: DoubleState, node: str, name: str) -> list[dict[str, Any]]:
    """Volumes of a storage: template files, and CT volumes named in the config files."""
    storage = state.storage(name)
    items = [
        {
            "volid": f"{name}:vztmpl/{template}",
            "content": "vztmpl",
            "format": template.rsplit(".", 1)[-1].replace("zst", "tzst").replace("xz", "txz"),
            "size": 150 << 20,
            "ctime": ctime,
        }
        for template, ctime in sorted(storage.templates.items())
    ]
    for vmid in state.configs.vmids(node):
        try:
            conf = state.configs.load(node, vmid)
        except ApiError:
            continue
        for key, value in sorted(conf.main.values.items()):
            if not (MOUNT_KEY.fullmatch(key) or key.startswith("unused")):
                continue
            try:
                volume = parse_mountpoint(state, key, value)
            except FormatError:  # a hand-edited file may hold anything
                continue
            parsed = parse_volume_id(volume.get("volume", ""))
            if parsed is None or parsed[0] != name:
                continue
            items.append(
                {
                    "volid": volume["volume"],
                    "content": "rootdir",
                    "format": "raw",
                    "vmid": vmid,
                    "size": parse_size(volume.get("size", "")) or 0,
                }
            )
    return items


@route("GET", "/nodes/{node}/storage")
def storages(req: Request) -> list[dict[str, Any]]:
    req.state.check_node(req.node)
    wanted_content = req.params.get("content")
    result = []
    for name, storage in sorted(req.state.storages.items()):
        if wanted_content and not set(str(wanted_content).split(",")) & storage.content:
            continue
        used = sum(item["size"] for item in _storage_used(req.state, req.node, name))
        result.append(storage.info(used))
    return result


@route("GET", "/nodes/{node}/storage/{storage}")
def storage_index(req: Request) -> list[dict[str, str]]:
    req.state.check_node(req.node)
    req.state.storage(str(req.params["storage"]))
    return [{"subdir": name} for name in ("content", "status", "download-url")]


@route("GET", "/nodes/{node}/storage/{storage}/status")
def storage_status(req: Request) -> dict[str, Any]:
    req.state.check_node(req.node)
    name = str(req.params["storage"])
    storage = req.state.storage(name)
    used = sum(item["size"] for item in _storage_used(req.state, req.node, name))
    return storage.info(used)


@route("GET", "/nodes/{node}/storage/{storage}/content")
def storage_content(req: Request) -> list[dict[str, Any]]:
    req.state.check_node(req.node)
    items = _storage_used(req.state, req.node, str(req.params["storage"]))
    content, vmid = req.params.get("content"), req.params.get("vmid")
    return [
        item
        for item in items
        if (content is None or item["content"] == content)
        and (vmid is None or item.get("vmid") == vmid)
    ]


@route("GET", "/nodes/{node}/aplinfo")
def aplinfo(req: Request) -> list[dict[str, Any]]:
    req.state.check_node(req.node)
    return [appliance.info() for appliance in req.state.appliances.values()]


@route("POST", "/nodes/{node}/aplinfo")
def apl_download(req: Request) -> str:
    state = req.state
    state.check_node(req.node)
    template = str(req.params["template"])
    if template not in state.appliances:
        raise param_error({"template": "no such template"})
    name = str(req.params["storage"])
    storage = state.storage(name)
    if "vztmpl" not in storage.content:
        raise fail(f"storage '{name}' does not support templates")

    def worker(log: TaskLog) -> None:
        log(f"downloading http://download.proxmox.com/images/system/{template} to {template}")
        time.sleep(state.settings.task_delay)
        log("download of template finished")
        storage.templates[template] = int(time.time())

    return state.tasks.spawn(req.node, "download", template, req.caller, worker).upid


@route("GET", "/nodes/{node}/hardware/pci")
def pci(req: Request) -> list[dict[str, Any]]:
    req.state.check_node(req.node)
    return [dict(device) for device in req.state.settings.pci_devices]


@route("GET", "/cluster/resources")
def resources(req: Request) -> list[dict[str, Any]]:
    state = req.state
    kind = req.params.get("type")
    result: list[dict[str, Any]] = []
    if kind in (None, "vm"):
        for vmid, node in sorted(state.configs.all_vmids().items()):
            try:
                conf = state.configs.load(node, vmid)
            except ApiError:
                continue
            item = vmstatus(state, vmid, conf)
            item.pop("pid", None)
            item.update({"id": f"lxc/{vmid}", "node": node, "maxcpu": item.pop("cpus")})
            item.setdefault("template", 0)
            result.append(item)
    if kind in (None, "storage"):
        for node in state.settings.nodes:
            for name, storage in sorted(state.storages.items()):
                used = sum(item["size"] for item in _storage_used(state, node, name))
                result.append(
                    {
                        "id": f"storage/{node}/{name}",
                        "type": "storage",
                        "node": node,
                        "storage": name,
                        "status": "available",
                        "content": ",".join(sorted(storage.content)),
                        "plugintype": storage.type,
                        "shared": 0,
                        "maxdisk": storage.total,
                        "disk": used,
                    }
                )
    if kind in (None, "node"):
        result += [_node_info(state, node) for node in state.settings.nodes]
    return result


def _task(req: Request) -> Task:
    req.state.check_node(req.node)
    upid = str(req.params["upid"])
    task = req.state.tasks.get(upid)
    if task is None or task.node != req.node:
        parts = upid.split(":")
        if len(parts) != 9 or parts[0] != "UPID":
            raise fail(f"unable to parse worker upid '{upid}'")
        raise fail(f"no such task '{upid}'")
    return task


@route("GET", "/nodes/{node}/tasks")
def task_list(req: Request) -> list[dict[str, Any]]:
    req.state.check_node(req.node)
    params = req.params
    source = params.get("source", "archive")
    tasks = [t for t in req.state.tasks.all() if t.node == req.node]
    if source == "archive":
        tasks = [t for t in tasks if not t.running]
    elif source == "active":
        tasks = [t for t in tasks if t.running]
    if params.get("vmid") is not None:
        tasks = [t for t in tasks if t.id == str(params["vmid"])]
    if params.get("typefilter"):
        tasks = [t for t in tasks if t.type == params["typefilter"]]
    if params.get("userfilter"):
        tasks = [t for t in tasks if str(params["userfilter"]) in t.caller.authid]
    if params.get("errors"):
        tasks = [t for t in tasks if not t.running and t.exitstatus != "OK"]
    tasks.sort(key=lambda t: (t.starttime, t.pid), reverse=True)
    start, limit = int(params.get("start", 0)), int(params.get("limit", 50))
    return [t.list_entry() for t in tasks[start : start + limit]]


@route("GET", "/nodes/{node}/tasks/{upid}")
def task_index(req: Request) -> list[dict[str, str]]:
    _task(req)
    return [{"name": "log"}, {"name": "status"}]


@route("GET", "/nodes/{node}/tasks/{upid}/status")
def task_status(req: Request) -> dict[str, Any]:
    return _task(req).status()


@route("GET", "/nodes/{node}/tasks/{upid}/log")
def task_log(req: Request) -> list[dict[str, Any]]:
    lines = list(_task(req).log.lines)
    start, limit = int(req.params.get("start", 0)), int(req.params.get("limit", 50))
    if limit == 0:
        limit = len(lines)
    return [{"n": n + 1, "t": lines[n]} for n in range(start, min(start + limit, len(lines)))]


@route("DELETE", "/nodes/{node}/tasks/{upid}")
def task_stop(req: Request) -> None:
    task = _task(req)
    if task.running:
        raise fail("the dflashops PVE double cannot interrupt a running task")
