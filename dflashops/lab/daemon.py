"""The lab daemon: one process that owns every lab part and tears all of it down on SIGTERM.

``lab up`` starts ``python -m dflashops.lab.daemon`` detached. The daemon creates the lab bridge,
the two PVE node hosts ``lab`` and ``lab2`` (fake ``pveversion``/``nvidia-smi``/``pct``,
``/dev/nvidia*``, ``/etc/pve`` shared with the double and with each other, as in a cluster) and
the PVE API double, whose started containers become netns hosts. Every sshd is a child of this
process, so nothing outlives it. Once every endpoint answers it writes ``ready.json``; ``lab
down`` sends SIGTERM and waits for the pidfile to go.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from dflashops.lab import hosts, netns
from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.node import NodeSpec, node_mounts, node_setup_script, render_node_root
from dflashops.lab.paths import LabPaths, lab_paths
from dflashops.lab.pve.containers import PRIVATE, NetnsContainers
from dflashops.lab.pve.double import PveDouble
from dflashops.lab.pve.state import DoubleSettings

log = logging.getLogger("dflashops.lab")

LAB_NODE = "lab"
# the second PVE node of the lab's cluster, a node host of its own (as a real cluster has):
# lab-ct2 lives there, so a placement across lab-ct1 and lab-ct2 spans two nodes
LAB_NODE2 = "lab2"
LAB_NODES = (LAB_NODE, LAB_NODE2)
# mount points inside lab containers for the cached vLLM venv and lab models (read-only)
CT_VENV_DIR = "/opt/lab/venv-vllm-cpu"
CT_MODELS_DIR = "/opt/lab/models"


@dataclass(frozen=True)
class LabNetwork:
    """Names and addresses of one lab; tests run isolated labs with other values."""

    bridge: str = "dfolab0"
    cidr: str = "10.200.0.0/24"
    api_port: int = 8006
    node_host: str = "dfo-node"

    @classmethod
    def from_env(cls) -> LabNetwork:
        """Defaults, or ``DFLASHOPS_LAB_{BRIDGE,CIDR,API_PORT,NODE_HOST}`` (isolated test labs)."""
        env = os.environ
        return cls(
            bridge=env.get("DFLASHOPS_LAB_BRIDGE", cls.bridge),
            cidr=env.get("DFLASHOPS_LAB_CIDR", cls.cidr),
            api_port=int(env.get("DFLASHOPS_LAB_API_PORT", cls.api_port)),
            node_host=env.get("DFLASHOPS_LAB_NODE_HOST", cls.node_host),
        )

    @property
    def container_prefix(self) -> str:
        """Netns names of this lab's containers: ``dfo-ct<vmid>`` for the default lab,
        ``dfo<tag>-ct<vmid>`` for the lab whose node host is ``dfo-node<tag>``."""
        tag = self.node_host.removeprefix("dfo-node")
        if tag == self.node_host:  # a node host named otherwise: its last letters tell labs apart
            tag = "".join(ch for ch in self.node_host if ch.isalnum())[-3:]
        return f"dfo{tag}-ct"

    def argv(self) -> list[str]:
        return [
            f"--bridge={self.bridge}",
            f"--cidr={self.cidr}",
            f"--api-port={self.api_port}",
            f"--node-host={self.node_host}",
        ]

    @property
    def prefix(self) -> int:
        return int(self.cidr.split("/")[1])

    def host_address(self, index: int) -> str:
        base = self.cidr.split("/")[0].rsplit(".", 1)[0]
        return f"{base}.{index}"

    @property
    def gateway(self) -> str:
        return self.host_address(1)

    @property
    def node_address(self) -> str:
        return self.host_address(2)

    def node_hosts(self) -> dict[str, tuple[str, str]]:
        """PVE node name -> (netns host name, address): ``lab`` on .2, ``lab2`` on .3."""
        return {
            LAB_NODE: (self.node_host, self.node_address),
            LAB_NODE2: (f"{self.node_host}2", self.host_address(3)),
        }


class LabContainers(NetnsContainers):
    """Lab containers whose host keys are recorded in the lab's ``known_hosts`` on start.

    That file is the lab's out-of-band trust anchor: clients keep verifying host keys, and a
    container recreated at the same address gets its new key recorded here, not accepted blindly.
    """

    def __init__(self, known_hosts: Path, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.known_hosts = known_hosts

    def on_start(self, vmid: int, config: Mapping[str, str]) -> str | None:
        address = super().on_start(vmid, config)
        host = self.host(vmid)
        if host is not None:
            record_host_key(self.known_hosts, host.known_hosts, host.address)
        return address


_known_hosts_lock = threading.Lock()


def record_host_key(known_hosts: Path, source: Path, address: str) -> None:
    """Replace ``address``'s lines in ``known_hosts`` with those in ``source``."""
    with _known_hosts_lock:
        lines = known_hosts.read_text().splitlines() if known_hosts.exists() else []
        kept = [line for line in lines if line.split(" ", 1)[0] not in (address, f"[{address}]:22")]
        kept += [line for line in source.read_text().splitlines() if line.strip()]
        tmp = known_hosts.with_suffix(".tmp")
        tmp.write_text("\n".join(kept) + "\n")
        tmp.replace(known_hosts)


def stage_mounts(paths: LabPaths, extra: list[Mount]) -> list[Mount]:
    """Re-point bind sources that containers cannot see at a staging bind under the run folder.

    Containers mount a private ``/root`` before the extra binds, so a source in ``~/.cache``
    would be gone by then; a bind of it under ``/run/dflashops-lab/mnt`` stays visible.
    """
    staged = []
    for index, mount in enumerate(extra):
        source = mount.source
        if source is None or not any(source.is_relative_to(p) for p in PRIVATE):
            staged.append(mount)
            continue
        stage = paths.run / "mnt" / str(index)
        stage.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "--bind", str(source), str(stage)], check=True, timeout=15)
        if mount.read_only:
            # read-only at the stage too, not only inside the containers: the stage sits in the
            # run folder, and a cleanup that walks into it (an rmtree) must meet EROFS rather
            # than delete this machine's venv, models or Python through it
            subprocess.run(["mount", "-o", "remount,bind,ro", str(stage)], check=True, timeout=15)
        staged.append(Mount.bind(stage, mount.target, read_only=mount.read_only))
    return staged


def unstage_mounts(paths: LabPaths) -> None:
    folder = paths.run / "mnt"
    if folder.is_dir():
        for stage in folder.iterdir():
            subprocess.run(["umount", "-l", str(stage)], check=False, timeout=15)


def run_daemon(paths: LabPaths, net: LabNetwork, spec: NodeSpec, extra: list[Mount]) -> None:
    """Bring the lab up, serve until SIGTERM/SIGINT, then take everything down."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    paths.run.mkdir(parents=True, exist_ok=True)
    paths.etc_pve.mkdir(parents=True, exist_ok=True)
    netns.ensure_bridge(net.bridge, net.cidr)
    nodes: dict[str, SshHost] = {}
    unstage_mounts(paths)
    staged = stage_mounts(paths, extra)
    containers = LabContainers(
        paths.known_hosts,
        paths.run / "containers",
        bridge=net.bridge,
        network=net.cidr,
        own_bridge=False,
        extra_mounts=staged,
        host_prefix=net.container_prefix,
    )
    try:
        root = render_node_root(paths.run, spec)
        for name, (host_name, address) in net.node_hosts().items():
            node = hosts.start_netns_host(
                host_name,
                bridge=net.bridge,
                address=f"{address}/{net.prefix}",
                workdir=paths.run / "hosts",
                # /etc/pve is one folder for both, as pmxcfs shares it across a cluster
                mounts=node_mounts(root, paths.etc_pve),
                hostname=name,
                client_key=paths.ssh_key,
            )
            nodes[name] = node
            hosts.host_exec(node, ["sh", "-ec", node_setup_script(root, spec)])
            record_host_key(paths.known_hosts, node.known_hosts, node.address)
        device_names = {f"/dev/{name}" for name, _, _ in spec.device_nodes()}
        settings = DoubleSettings(
            state_dir=paths.pve_state,
            users={"root@pam": paths.password_file.read_text().strip()},
            tokens={"root@pam!dflashops": paths.token_file.read_text().strip()},
            etc_pve=paths.etc_pve,
            nodes=LAB_NODES,
            backend=containers.up(),
            device_exists=device_names.__contains__,
            tls_hosts=("127.0.0.1", "localhost"),
            pve_version=spec.pve_version,
        )
        with PveDouble(settings, host="127.0.0.1", port=net.api_port) as double:
            ready = {
                "pid": os.getpid(),
                "api_url": double.api_url,
                "ca_file": str(double.ca_path),
                "node": _node_entry(LAB_NODE, nodes[LAB_NODE]),
                "nodes": [_node_entry(name, host) for name, host in nodes.items()],
                "bridge": net.bridge,
                "cidr": net.cidr,
                "mounts": {m.target: str(m.source) for m in extra},
            }
            paths.ready.write_text(json.dumps(ready, indent=2))
            log.info("lab ready: %s", ready)
            stop.wait()
            log.info("lab stopping")
    finally:
        paths.ready.unlink(missing_ok=True)
        containers.down()
        for node in nodes.values():
            hosts.stop_host(node)
        for host_name, _ in net.node_hosts().values():
            hosts.remove_netns_host(host_name)
        netns.remove_bridge(net.bridge)
        unstage_mounts(paths)


def _node_entry(name: str, host: SshHost) -> dict[str, object]:
    return {"name": name, "address": host.address, "ssh_port": host.port}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dflashops.lab.daemon")
    parser.add_argument("--bridge", default=LabNetwork.bridge)
    parser.add_argument("--cidr", default=LabNetwork.cidr)
    parser.add_argument("--api-port", type=int, default=LabNetwork.api_port)
    parser.add_argument("--node-host", default=LabNetwork.node_host)
    parser.add_argument("--node-spec", type=Path, help="JSON NodeSpec overrides")
    parser.add_argument(
        "--mount",
        action="append",
        default=[],
        metavar="SOURCE:TARGET",
        help="read-only bind mount into every container (repeatable)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    paths = lab_paths()
    spec = NodeSpec.from_json(args.node_spec.read_text()) if args.node_spec else NodeSpec()
    extra = []
    for item in args.mount:
        source, _, target = item.partition(":")
        extra.append(Mount.bind(Path(source), target))
    net = LabNetwork(
        bridge=args.bridge, cidr=args.cidr, api_port=args.api_port, node_host=args.node_host
    )
    paths.pidfile.write_text(str(os.getpid()))
    try:
        run_daemon(paths, net, spec, extra)
    finally:
        paths.pidfile.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
