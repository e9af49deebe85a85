"""``lab up | down | status``: start, stop and describe the lab daemon (idempotent).

The daemon (:mod:`dflashops.lab.daemon`) owns every lab process; this module only prepares its
inputs (password, token, SSH key), starts it detached, waits for ``ready.json``, writes the lab
inventory and reads state back for ``status``.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dflashops.cache import cache_root
from dflashops.errors import tail_lines
from dflashops.lab import hosts
from dflashops.lab.daemon import LAB_NODE, LAB_NODE2, LAB_NODES, LabNetwork, unstage_mounts
from dflashops.lab.errors import LabError
from dflashops.lab.paths import LabPaths, lab_paths
from dflashops.lab.run_folder import daemon_using, remove_run_folder

Progress = Callable[[str], None]
UP_TIMEOUT_S = 90.0
DOWN_TIMEOUT_S = 60.0
LAB_CONTAINERS = {"lab-ct1": 10, "lab-ct2": 11}  # name -> host part of its address
# name -> its PVE node: one container on each, so the lab's placement spans two nodes
LAB_PLACES = {"lab-ct1": LAB_NODE, "lab-ct2": LAB_NODE2}
LAB_TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"


@dataclass
class LabStatus:
    """What ``lab status`` reports: whether the daemon runs, and every endpoint."""

    running: bool
    state_dir: str
    inventory: str | None = None
    pid: int | None = None
    api_url: str | None = None
    ca_file: str | None = None
    node: dict[str, Any] | None = None  # the first node (``nodes`` lists every one)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    containers: list[dict[str, Any]] = field(default_factory=list)
    servers: list[dict[str, Any]] = field(default_factory=list)
    mounts: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def daemon_pid(paths: LabPaths) -> int | None:
    """The daemon's pid when its pidfile names a live process."""
    try:
        pid = int(paths.pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def lab_up(
    net: LabNetwork | None = None,
    *,
    mounts: dict[str, Path] | None = None,
    progress: Progress | None = None,
    paths: LabPaths | None = None,
) -> LabStatus:
    """Start the lab unless it already runs; write its inventory; return its status.

    ``mounts`` maps a container path to a host directory bind-mounted read-only into every lab
    container (the cached vLLM venv, the lab models).
    """
    paths = paths or lab_paths()
    net = net or LabNetwork.from_env()
    say = progress or (lambda _m: None)
    if daemon_pid(paths) is not None and paths.ready.exists():
        say("lab already running")
        write_inventory(paths, net)
        return lab_status(paths)
    _check_can_run()
    _prepare_state(paths)
    say("starting the lab daemon (bridge, PVE node host, PVE API double)")
    argv = [sys.executable, "-m", "dflashops.lab.daemon", *net.argv()]
    for target, source in sorted((mounts or {}).items()):
        argv.append(f"--mount={source}:{target}")
    node_spec = os.environ.get("DFLASHOPS_LAB_NODE_SPEC")  # a NodeSpec JSON file (scenario labs)
    if node_spec:
        argv.append(f"--node-spec={node_spec}")
    env = {
        **os.environ,
        "DFLASHOPS_LAB_STATE": str(paths.state),
        "DFLASHOPS_LAB_RUN": str(paths.run),
    }
    with paths.log.open("ab") as log:
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not paths.ready.exists():
        if proc.poll() is not None:
            raise LabError(
                f"the lab daemon exited with {proc.returncode}: "
                f"{tail_lines(paths.log.read_text(errors='replace'), 4)}",
                hint=f"full log: {paths.log}",
            )
        if time.monotonic() > deadline:
            _stop_daemon(paths, proc.pid)
            raise LabError(
                f"the lab did not come up in {UP_TIMEOUT_S:.0f}s", hint=f"see {paths.log}"
            )
        time.sleep(0.2)
    write_inventory(paths, net)
    say(f"lab up; inventory: {paths.inventory}")
    return lab_status(paths)


def lab_down(
    *, purge: bool = False, paths: LabPaths | None = None, progress: Progress | None = None
) -> bool:
    """Stop the daemon, sweep leftovers and remove lab state; ``purge`` also drops the caches.

    Returns whether a running lab was stopped.
    """
    paths = paths or lab_paths()
    say = progress or (lambda _m: None)
    pid = daemon_pid(paths)
    if pid is not None:
        say(f"stopping the lab daemon (pid {pid})")
        _stop_daemon(paths, pid)
        # its pidfile goes before the process does (the interpreter still exits): wait for that,
        # or the check below takes our own daemon for another lab's
        deadline = time.monotonic() + 10
        while daemon_using(paths.run) == pid and time.monotonic() < deadline:
            time.sleep(0.1)
    elif os.geteuid() == 0 and paths.state.exists():
        # a daemon that died without cleaning up (SIGKILL, OOM): sweep its hosts by name
        network = LabNetwork.from_env()
        hosts.remove_netns_hosts(network.container_prefix)
        for host_name, _ in network.node_hosts().values():
            hosts.remove_netns_host(host_name)
        unstage_mounts(paths)
    other = daemon_using(paths.run)
    if other is not None:
        raise LabError(
            f"another lab daemon (pid {other}) runs from {paths.run}; not touching it",
            hint="stop that lab with its own DFLASHOPS_LAB_STATE, or pick another "
            "DFLASHOPS_LAB_RUN",
        )
    shutil.rmtree(paths.state, ignore_errors=True)
    remove_run_folder(paths.run)
    if purge:
        for folder in _cache_folders():
            say(f"removing {folder}")
            shutil.rmtree(folder, ignore_errors=True)
    return pid is not None


def lab_status(paths: LabPaths | None = None, *, query_api: bool = True) -> LabStatus:
    """The lab's endpoints; containers come from the PVE double's API when it runs."""
    paths = paths or lab_paths()
    pid = daemon_pid(paths)
    status = LabStatus(running=pid is not None and paths.ready.exists(), state_dir=str(paths.state))
    if not status.running:
        return status
    ready = json.loads(paths.ready.read_text())
    status.pid = pid
    status.inventory = str(paths.inventory)
    status.api_url = ready["api_url"]
    status.ca_file = ready["ca_file"]
    status.nodes = [
        {**node, "ssh": f"root@{node['address']}:{node['ssh_port']}"}
        for node in ready.get("nodes", [ready["node"]])
    ]
    status.node = status.nodes[0]
    status.mounts = ready.get("mounts", {})
    if query_api:
        status.containers = _containers(paths)
        status.servers = _servers(paths, status.containers)
    return status


def _servers(paths: LabPaths, containers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inference server in each running lab container (what ``launch`` deployed)."""
    from dflashops.inventory.load import load_inventory
    from dflashops.launch.status import status_probe
    from dflashops.proxmox.lifecycle import ContainerStatus

    inv = load_inventory(paths.inventory)
    found = []
    for entry in containers:
        name = entry.get("name")
        if entry.get("status") != "running" or name not in inv.containers:
            continue
        ct = inv.container(str(name))
        probe = ContainerStatus(name=ct.name, cluster=ct.cluster, node=str(entry["node"]))
        probe.address = entry.get("address")
        server = status_probe(inv, ct, probe)
        if server.running:
            found.append(
                {
                    "container": name,
                    "url": server.endpoint,
                    "engine": f"{server.engine} {server.engine_version}",
                    "method": server.method,
                    "num_speculative_tokens": server.num_speculative_tokens,
                }
            )
    return found


def _containers(paths: LabPaths) -> list[dict[str, Any]]:
    from dflashops.inventory.load import load_inventory
    from dflashops.proxmox.client import PveClient

    inv = load_inventory(paths.inventory)
    client = PveClient(inv.clusters["lab"], inv.secret("lab"))
    found = []
    for node, item in ((n, i) for n in LAB_NODES for i in client.get(f"nodes/{n}/lxc") or []):
        vmid = int(item["vmid"])
        entry = {
            "vmid": vmid,
            "name": item.get("name"),
            "node": node,
            "status": item.get("status"),
            "address": None,
        }
        if item.get("status") == "running":
            for iface in client.get(f"nodes/{node}/lxc/{vmid}/interfaces") or []:
                inet = str(iface.get("inet") or "")
                if iface.get("name") == "eth0" and inet:
                    entry["address"] = inet.split("/", maxsplit=1)[0]
        found.append(entry)
    return sorted(found, key=lambda e: e["vmid"])


def write_inventory(paths: LabPaths, net: LabNetwork) -> Path:
    """The inventory every other command uses on the lab (``-i`` points at it)."""
    ready = json.loads(paths.ready.read_text())
    ssh = {"user": "root", "key_file": str(paths.ssh_key), "known_hosts": str(paths.known_hosts)}
    containers: dict[str, dict[str, Any]] = {
        name: {
            "vmid": 200 + index - 10,
            "node": LAB_PLACES[name],
            "network": {
                "bridge": "vmbr0",
                "ip": f"{net.host_address(index)}/{net.prefix}",
                "gateway": net.gateway,
            },
        }
        for name, index in LAB_CONTAINERS.items()
    }
    containers["lab-ct2"]["gpus"] = [0, 1]  # fake GPUs: exercises passthrough on the node
    doc = {
        "version": 1,
        "clusters": {
            "lab": {
                "api_url": f"https://127.0.0.1:{net.api_port}",
                "verify_tls": True,
                "ca_file": ready["ca_file"],
                "auth": {"user": "root@pam", "password": {"file": str(paths.password_file)}},
                "nodes": {
                    name: {"ssh": {"host": address, **ssh}}
                    for name, (_, address) in net.node_hosts().items()
                },
            }
        },
        "defaults": {
            # a container without node: lives on the first (the cluster has two)
            "node": LAB_NODE,
            "template": LAB_TEMPLATE,
            "storage": "local-lvm",
            "rootfs_gb": 8,
            "cores": 2,
            "memory_mb": 4096,
            "swap_mb": 0,
            "shm_gb": 1,
            "unprivileged": True,
            # the node's GPUs are device nodes with no driver behind them and nothing to
            # download a driver from: plan the in-container driver steps, apply none
            "nvidia_driver": "skip",
            "ssh": ssh,
        },
        "containers": containers,
    }
    header = (
        "# Written by `dflashops lab up`: the lab's PVE double, its two nodes and containers.\n"
        f"# Use it with: dflashops -i {paths.inventory} <command>\n"
        "# nvidia_driver is skip: the lab's GPUs are device nodes with no driver behind them.\n"
    )
    paths.inventory.write_text(header + yaml.safe_dump(doc, sort_keys=False))
    return paths.inventory


def _check_can_run() -> None:
    if os.geteuid() != 0:
        raise LabError("the lab needs root (network namespaces, bridges, mknod)")
    reason = hosts.netns_unavailable_reason()
    if reason:
        raise LabError(f"cannot start the lab: {reason}", hint="run scripts/setup.sh as root")


def _prepare_state(paths: LabPaths) -> None:
    paths.state.mkdir(parents=True, exist_ok=True)
    paths.state.chmod(0o700)
    paths.ready.unlink(missing_ok=True)
    for secret_file, value in (
        (paths.password_file, secrets.token_urlsafe(18)),
        (paths.token_file, secrets.token_hex(16)),
    ):
        if not secret_file.exists():
            secret_file.write_text(value + "\n")
        secret_file.chmod(0o600)
    paths.ssh_key.parent.mkdir(parents=True, exist_ok=True)
    if not paths.ssh_key.exists():
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "dflashops-lab",
                "-f",
                str(paths.ssh_key),
            ],
            check=True,
            capture_output=True,
            timeout=30,
        )
    paths.known_hosts.touch()


def _stop_daemon(paths: LabPaths, pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while time.monotonic() < deadline:
        if daemon_pid(paths) is None or not _alive(pid):
            return
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of ours still answers kill(0): reap it
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return done == 0


def _cache_folders() -> list[Path]:
    """The lab's caches: the vLLM venv, the models, their lock files and path shims."""
    return [cache_root() / "lab"]
