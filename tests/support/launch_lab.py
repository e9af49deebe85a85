"""An isolated lab (its own bridge, PVE double and node host) with containers made through the
double and nothing else in them: what launch's integration tests run against."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from dflashops.inventory.load import Inventory, load_inventory
from dflashops.proxmox.client import PveClient
from dflashops.remote import SshConnection
from tests.support.lab import isolated_lab_env, run_cli

TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"


@dataclass
class Lab:
    env: dict[str, str]
    inventory_path: Path
    inventory: Inventory
    workdir: Path
    addresses: dict[str, str]

    def conn(self, name: str) -> SshConnection:
        ct = self.inventory.container(name)
        return SshConnection.from_access(ct.ssh, host=ct.ssh_host, deadline=60)

    def address(self, name: str) -> str:
        return self.addresses[name]


@contextmanager
def containers_lab(
    workdir: Path, *, tag: str, cidr: str, containers: Mapping[str, tuple[int, str]]
) -> Iterator[Lab]:
    """``lab up`` of a lab of its own, then ``containers`` (name: (vmid, address)) created and
    started through the PVE double; the inventory names only them. ``lab down`` at the end
    stops every container and its processes."""
    env = isolated_lab_env(workdir, tag=tag, cidr=cidr)
    try:
        status = json.loads(run_cli(env, "lab", "up", "--json").stdout)
        lab_inventory = load_inventory(Path(status["inventory"]))
        client = PveClient(lab_inventory.clusters["lab"], lab_inventory.secret("lab"))
        key_file = lab_inventory.container("lab-ct1").ssh.key_file
        key = Path(f"{key_file}.pub").read_text()
        doc = yaml.safe_load(Path(status["inventory"]).read_text())
        doc["containers"] = {}
        for name, (vmid, ip) in containers.items():
            upid = client.post(
                "nodes/lab/lxc",
                vmid=vmid,
                ostemplate=TEMPLATE,
                storage="local-lvm",
                hostname=name,
                net0=f"name=eth0,bridge=vmbr0,ip={ip}/24",
                tags="dflashops",
                **{"ssh-public-keys": key},
            )
            client.wait_task(upid, timeout_s=60)
            client.wait_task(client.post(f"nodes/lab/lxc/{vmid}/status/start"), timeout_s=60)
            doc["containers"][name] = {
                "vmid": vmid,
                "network": {"bridge": "vmbr0", "ip": f"{ip}/24"},
            }
        path = workdir / "inventory.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        addresses = {name: ip for name, (_vmid, ip) in containers.items()}
        # commands run in the test see these containers (lab down still finds its own state)
        commands = {**env, "DFLASHOPS_INVENTORY": str(path)}
        yield Lab(commands, path, load_inventory(path), workdir, addresses)
    finally:
        run_cli(env, "lab", "down", check=False)
