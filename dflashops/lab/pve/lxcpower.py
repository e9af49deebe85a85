"""Container power state: ``status/*``, destroy and ``interfaces``.

Like pve-container, the running-state checks (``already running`` / ``not running``) are
synchronous HTTP 500s, while the lock check of start/stop runs inside the worker, so a locked
container's start returns a UPID whose task fails with ``CT is locked (<lock>)``.
"""

from __future__ import annotations

import time
from typing import Any

from dflashops.lab.pve import lxcconfig
from dflashops.lab.pve.conffile import ContainerConfig
from dflashops.lab.pve.ctcommon import (
    CT,
    check_lock,
    interfaces_from_config,
    load,
    vmstatus,
)
from dflashops.lab.pve.errors import TaskFailed, fail, param_error
from dflashops.lab.pve.routing import Request, route
from dflashops.lab.pve.state import DoubleState
from dflashops.lab.pve.tasks import TaskLog


@route("GET", CT + "/status")
def status_index(req: Request) -> list[dict[str, str]]:
    load(req)
    return [{"subdir": name} for name in ("current", "start", "stop", "shutdown", "reboot")]


@route("GET", CT + "/status/current")
def status_current(req: Request) -> dict[str, Any]:
    conf = load(req)
    data = vmstatus(req.state, req.vmid, conf)
    data["ha"] = {"managed": 0}
    return data


def _check_skiplock(req: Request) -> bool:
    skiplock = bool(req.params.get("skiplock"))
    if skiplock and not req.caller.is_root_pam:
        raise param_error({"skiplock": "Only root may use this option."})
    return skiplock


def start_task(req: Request, skiplock: bool = False) -> str:
    state, node, vmid = req.state, req.node, req.vmid

    def worker(log: TaskLog) -> None:
        time.sleep(state.settings.task_delay)
        with state.configs.locked(vmid):
            conf = state.configs.load(node, vmid)
            if conf.main.values.get("template") == "1":
                raise TaskFailed("you can't start a CT if it's a template")
            lock = conf.main.values.get("lock")
            if lock and not skiplock and lock != "mounted":
                raise TaskFailed(f"CT is locked ({lock})")
            if state.runtime_of(vmid).running:
                raise TaskFailed(f"CT {vmid} already running")
            if conf.pending.values:
                lxcconfig.apply_pending(state, vmid, conf, running=False)
                state.configs.save(node, vmid, conf)
            for key, value in conf.main.values.items():
                if lxcconfig.is_dev_key(key):
                    lxcconfig.check_device(state, key, value)
            address = None
            if state.settings.backend is not None:
                address = state.settings.backend.on_start(vmid, dict(conf.main.values))
            runtime = state.runtime_of(vmid)
            runtime.running, runtime.started, runtime.address = True, time.time(), address
        log(f"starting CT {vmid}")

    return state.tasks.spawn(node, "vzstart", str(vmid), req.caller, worker).upid


def stop_task(req: Request, kind: str, skiplock: bool = False) -> str:
    state, node, vmid = req.state, req.node, req.vmid

    def worker(log: TaskLog) -> None:
        time.sleep(state.settings.task_delay)
        with state.configs.locked(vmid):
            conf = state.configs.load(node, vmid)
            lock = conf.main.values.get("lock")
            if lock and not skiplock and lock != "mounted":
                raise TaskFailed(f"CT is locked ({lock})")
            _stop(state, vmid)
            if kind == "vzreboot":
                if conf.pending.values:
                    lxcconfig.apply_pending(state, vmid, conf, running=False)
                    state.configs.save(node, vmid, conf)
                backend = state.settings.backend
                address = backend.on_start(vmid, dict(conf.main.values)) if backend else None
                runtime = state.runtime_of(vmid)
                runtime.running, runtime.started, runtime.address = True, time.time(), address
        log(f"{kind.removeprefix('vz')} CT {vmid}")

    return state.tasks.spawn(node, kind, str(vmid), req.caller, worker).upid


def _stop(state: DoubleState, vmid: int) -> None:
    runtime = state.runtime_of(vmid)
    if runtime.running and state.settings.backend is not None:
        state.settings.backend.on_stop(vmid)
    runtime.running, runtime.address = False, None


def _require_running(req: Request) -> None:
    if not req.state.runtime_of(req.vmid).running:
        raise fail(f"CT {req.vmid} not running")


@route("POST", CT + "/status/start")
def start(req: Request) -> str:
    req.state.check_node(req.node)
    skiplock = _check_skiplock(req)
    if req.state.runtime_of(req.vmid).running:
        raise fail(f"CT {req.vmid} already running")
    return start_task(req, skiplock)


@route("POST", CT + "/status/stop")
def stop(req: Request) -> str:
    req.state.check_node(req.node)
    skiplock = _check_skiplock(req)
    _require_running(req)
    return stop_task(req, "vzstop", skiplock)


@route("POST", CT + "/status/shutdown")
def shutdown(req: Request) -> str:
    req.state.check_node(req.node)
    _require_running(req)
    return stop_task(req, "vzshutdown")


@route("POST", CT + "/status/reboot")
def reboot(req: Request) -> str:
    req.state.check_node(req.node)
    _require_running(req)
    return stop_task(req, "vzreboot")


@route("DELETE", CT)
def destroy(req: Request) -> str:
    state, node, vmid = req.state, req.node, req.vmid
    force = bool(req.params.get("force"))

    def early_checks(conf: ContainerConfig) -> None:
        if conf.main.values.get("protection") == "1":
            raise fail(f"can't remove CT {vmid} - protection mode enabled")
        check_lock(conf)

    early_checks(load(req))
    running_error = f"unable to destroy CT {vmid} - container is running"
    if not force and state.runtime_of(vmid).running:
        raise fail(running_error)

    def worker(log: TaskLog) -> None:
        time.sleep(state.settings.task_delay)
        with state.configs.locked(vmid):
            conf = state.configs.load(node, vmid)
            early_checks(conf)
            if state.runtime_of(vmid).running:
                if not force:
                    raise TaskFailed(running_error)
                _stop(state, vmid)
            if state.settings.backend is not None:
                state.settings.backend.on_destroy(vmid)
            for key, value in conf.main.values.items():
                if lxcconfig.MOUNT_KEY.fullmatch(key) or key.startswith("unused"):
                    log(f'  Logical volume "{value.split(",")[0]}" successfully removed.')
            state.configs.remove(node, vmid)
            with state.lock:
                state.runtime.pop(vmid, None)

    return state.tasks.spawn(node, "vzdestroy", str(vmid), req.caller, worker).upid


@route("GET", CT + "/interfaces")
def interfaces(req: Request) -> list[dict[str, Any]]:
    conf = load(req)
    _require_running(req)
    backend = req.state.settings.backend
    if backend is not None:
        return backend.interfaces(req.vmid)
    return interfaces_from_config(req.state, conf.main.values)
