"""A fleet of lab containers (issue 36): an isolated lab (its own bridge, PVE double, two node
hosts, state and run folders; see :mod:`tests.support.lab`) and inventories naming any number of
light containers spread over its two PVE nodes, ``lab`` and ``lab2``, one after the other.

Used by tests/integration/test_fleet.py and benchmarks/fleet.py. The containers are created by
the commands under test (``provision``), not here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dflashops.lab.daemon import LabNetwork
from dflashops.lab.host_model import SshHost
from dflashops.lab.pve.containers import host_name
from tests.support.lab import isolated_lab_env, run_cli

NODES = ("lab", "lab2")
FIRST_HOST = 20  # container addresses start at .20 (.1 bridge, .2/.3 node hosts, .10/.11 lab-ct)


@dataclass(frozen=True)
class Timed:
    """One command's exit code, output and wall time."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


@dataclass
class FleetLab:
    env: dict[str, str]
    workdir: Path
    base: dict[str, Any]  # the lab's own inventory document
    net: str  # the first three octets of the lab's /24

    @property
    def known_hosts(self) -> Path:
        """The lab's known_hosts: node hosts and every container started, as the lab records."""
        return Path(self.base["defaults"]["ssh"]["known_hosts"])

    def address(self, index: int) -> str:
        """The address :meth:`inventory` gives its ``index``-th container (from 0)."""
        return f"{self.net}.{FIRST_HOST + index}"

    def container_host(self, vmid: int, address: str) -> SshHost:
        """Container ``vmid`` as the lab runs it (its netns), for :mod:`tests.support.faults`."""
        prefix = LabNetwork(node_host=self.env["DFLASHOPS_LAB_NODE_HOST"]).container_prefix
        name = host_name(vmid, prefix)
        ssh = self.base["defaults"]["ssh"]
        return SshHost(
            name=name,
            address=address,
            port=22,
            user="root",
            key_file=Path(ssh["key_file"]),
            known_hosts=Path(ssh["known_hosts"]),
            pid=0,
            workdir=self.workdir,
            netns=name,
            veth=f"v-{name}",
        )

    def names(self, count: int, prefix: str = "fct") -> list[str]:
        return [f"{prefix}{index}" for index in range(1, count + 1)]

    def inventory(
        self,
        names: Sequence[str],
        *,
        first_vmid: int = 400,
        parallel: int | None = None,
        file: str = "fleet.yaml",
        extra: dict[str, dict[str, Any]] | None = None,
    ) -> Path:
        """An inventory naming ``names`` (alternately on ``lab`` and ``lab2``, vmids from
        ``first_vmid``, static addresses from ``.20``); ``extra``: fields per container name."""
        doc = json.loads(json.dumps(self.base))
        if parallel is not None:
            doc["parallel"] = parallel
        doc["containers"] = {}
        for index, name in enumerate(names):
            doc["containers"][name] = {
                "vmid": first_vmid + index,
                "node": NODES[index % len(NODES)],
                "network": {
                    "bridge": "vmbr0",
                    "ip": f"{self.net}.{FIRST_HOST + index}/24",
                    "gateway": f"{self.net}.1",
                },
                **((extra or {}).get(name) or {}),
            }
        path = self.workdir / file
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    def run(
        self, inventory: Path, *args: str, timeout: float = 600, env: dict[str, str] | None = None
    ) -> Timed:
        """``dflashops -i INVENTORY ARGS`` as an operator runs it (stdout a pipe), timed."""
        argv = [sys.executable, "-m", "dflashops.cli", "-i", str(inventory), *args]
        started = time.monotonic()
        done = subprocess.run(
            argv,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
        seconds = time.monotonic() - started
        return Timed(tuple(args), done.returncode, done.stdout, done.stderr, seconds)


@contextmanager
def fleet_lab(workdir: Path, *, tag: str, cidr: str) -> Iterator[FleetLab]:
    """``lab up`` of a lab of its own in ``workdir``; ``lab down`` of that lab at the end (it
    stops and removes every container the commands made in it)."""
    env = isolated_lab_env(workdir, tag=tag, cidr=cidr)
    run_cli(env, "lab", "down", check=False, timeout=300)  # leftovers of a crashed earlier run
    try:
        status = json.loads(run_cli(env, "lab", "up", "--json", timeout=300).stdout)
        base = yaml.safe_load(Path(status["inventory"]).read_text())
        net = cidr.partition("/")[0].rsplit(".", 1)[0]
        yield FleetLab(env=env, workdir=workdir, base=base, net=net)
    finally:
        run_cli(env, "lab", "down", check=False, timeout=300)
