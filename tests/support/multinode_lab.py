"""Two lab containers for multi-node serving (issue 24): an isolated lab (its own bridge, PVE
double and node host, see :mod:`tests.support.lab`) with containers made through the double,
and the playbooks that serve the lab target on one of them or across them on vLLM's native
launcher (tensor-parallel 2).

Used by tests/integration/test_multinode.py and benchmarks/multinode_lab.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dflashops.inventory.load import Inventory, load_inventory
from dflashops.playbook.models import Playbook
from dflashops.proxmox.client import PveClient
from dflashops.remote import SshConnection
from tests.support.lab import isolated_lab_env, run_cli

TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
PORT = 30000
MASTER_PORT = 29611
LAB_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_LOG_STATS_INTERVAL": "1",
}


@dataclass
class MultiLab:
    inventory: Inventory
    addresses: dict[str, str]

    def conn(self, name: str) -> SshConnection:
        ct = self.inventory.container(name)
        return SshConnection.from_access(ct.ssh, host=ct.ssh_host, deadline=60)

    def endpoint(self, name: str) -> str:
        return f"http://{self.addresses[name]}:{PORT}/v1"


LAB_MEMBERS = ("lab-ct1", "lab-ct2")  # what playbooks/lab-multinode.yaml places


@contextmanager
def multinode_lab(
    workdir: Path,
    *,
    tag: str,
    cidr: str,
    containers: Mapping[str, tuple[int, str]] | None = None,
    nodes: Mapping[str, str] | None = None,
) -> Iterator[MultiLab]:
    """``lab up`` in ``workdir``, ``containers`` (name -> (vmid, address)) created and started
    through the PVE double; ``lab down`` on exit (stops every container and its processes).

    Without ``containers``: the lab inventory's own ``lab-ct1`` and ``lab-ct2`` (its vmids,
    addresses and nodes: ``lab`` and ``lab2``), so the shipped ``playbooks/lab-multinode.yaml``
    runs unchanged. ``nodes`` (name -> PVE node) places given ``containers``; default ``lab``.
    Nothing else is prepared in them: ``launch`` writes the members' names
    into ``/etc/hosts``, and every lab container has its own ``/dev/shm``
    (:mod:`dflashops.lab.pve.containers`).
    """
    env = isolated_lab_env(workdir, tag=tag, cidr=cidr)
    try:
        status = json.loads(run_cli(env, "lab", "up", "--json", timeout=300).stdout)
        path = Path(status["inventory"])
        lab_inventory = load_inventory(path)
        client = PveClient(lab_inventory.clusters["lab"], lab_inventory.secret("lab"))
        key = Path(f"{lab_inventory.container('lab-ct1').ssh.key_file}.pub").read_text()
        if containers is None:
            wanted = {}
            for name in LAB_MEMBERS:
                ct = lab_inventory.container(name)
                assert isinstance(ct.vmid, int)
                wanted[name] = (ct.vmid, ct.network.ip.partition("/")[0])
            # each on its own PVE node (lab-ct2 on lab2): the placement spans two nodes
            nodes = {name: lab_inventory.container(name).node for name in wanted}
        else:
            wanted = dict(containers)
            nodes = {name: (nodes or {}).get(name, "lab") for name in wanted}
            doc = yaml.safe_load(path.read_text())
            doc["containers"] = {
                name: {
                    "vmid": vmid,
                    "node": nodes[name],
                    "network": {"bridge": "vmbr0", "ip": f"{ip}/24"},
                }
                for name, (vmid, ip) in wanted.items()
            }
            path = workdir / "inventory.yaml"
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
        for name, (vmid, ip) in wanted.items():
            node = nodes[name]
            upid = client.post(
                f"nodes/{node}/lxc",
                vmid=vmid,
                ostemplate=TEMPLATE,
                storage="local-lvm",
                hostname=name,
                net0=f"name=eth0,bridge=vmbr0,ip={ip}/24",
                tags="dflashops",
                **{"ssh-public-keys": key},
            )
            client.wait_task(upid, timeout_s=60)
            client.wait_task(client.post(f"nodes/{node}/lxc/{vmid}/status/start"), timeout_s=60)
        yield MultiLab(load_inventory(path), {n: ip for n, (_, ip) in wanted.items()})
    finally:
        run_cli(env, "lab", "down", check=False, timeout=300)


def lab_playbook(container: str, placement: dict[str, Any] | None = None) -> Playbook:
    """The lab target (no drafter) on ``container``, or across ``placement``'s members."""
    env = dict(LAB_ENV)
    if placement is None:
        # one container: everything on loopback, as the shipped lab playbook serves
        env.update(VLLM_HOST_IP="127.0.0.1", GLOO_SOCKET_IFNAME="lo")
    else:
        # the members' interface; without it gloo resolves the hostname instead. vLLM's own
        # CPU binding stays ("auto": both members' ranks on core 0, core 1 left to the engine
        # cores and the API server): with `nobind` the five busy processes fight over both
        # cores and a token takes ~200 ms instead of ~17 ms (benchmarks/RESULTS.md, issue 24)
        env.update(GLOO_SOCKET_IFNAME="eth0")
    doc: dict[str, Any] = {
        "name": "lab-multinode" if placement else "lab-single",
        "container": container,
        "model": {"path": "/opt/lab/models/tiny-qwen3", "served_name": "tiny"},
        "engine": {"version": "0.32.0", "base_venv": "/opt/lab/venv-vllm-cpu-{version}"},
        "server": {
            "device": "cpu",
            "port": PORT,
            "max_model_len": 512,
            "enforce_eager": True,
            "extra_args": ["--dtype", "float32"],
            "env": env,
        },
    }
    if placement is not None:
        doc["placement"] = {"master_port": MASTER_PORT, "join_timeout_s": 240, **placement}
    return Playbook.model_validate(doc)
