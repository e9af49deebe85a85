"""Provision, status and destroy of several containers at once (issue 36), against the PVE double
in this process (real proxmoxer over verified HTTPS; no root, no SSH: the API part only): one
login and one listing per command, creation concurrent within a node and across nodes, vmids of
``vmid: auto`` creates handed out once each, a refused container that stops none of the others,
and every answer in inventory order."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab.pve import PveDouble, serve_double
from dflashops.proxmox.apply import ProvisionOptions, provision
from dflashops.proxmox.client import PveClient
from dflashops.proxmox.execute import StepRunner
from dflashops.proxmox.identity import list_resources
from dflashops.proxmox.lifecycle import container_status, destroy
from tests.support.inventories import double_cluster

pytestmark = pytest.mark.timeout(120)
TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl t@dfo"
API_ONLY = ProvisionOptions(guest=False, lock_wait_s=20, address_timeout_s=5, vmid_floor=950)
NAMES = ("f1", "f2", "f3", "f4", "f5", "f6")


@pytest.fixture
def double(tmp_path: Path) -> Iterator[PveDouble]:
    with serve_double(
        tmp_path / "pve", nodes=("lab", "lab2"), create_delay=0.3, task_delay=0.05
    ) as running:
        yield running


@pytest.fixture
def inventory(double: PveDouble, tmp_path: Path) -> Inventory:
    (tmp_path / "id_ed25519.pub").write_text(KEY + "\n")
    cluster = double_cluster(double, tmp_path)
    cluster["nodes"] = {"lab": {}, "lab2": {}}
    containers = {}
    for index, name in enumerate(NAMES):
        containers[name] = {
            "vmid": 960 + index if index < 4 else "auto",  # f5, f6: auto
            "node": ("lab", "lab2")[index % 2],
            "network": {"ip": f"10.200.99.{60 + index}/24", "gateway": "10.200.99.1"},
        }
    doc = {
        "parallel": 4,
        "clusters": {"lab": cluster},
        "defaults": {
            "template": TEMPLATE,
            "cores": 2,
            "memory_mb": 1024,
            "rootfs_gb": 8,
            "ssh": {"key_file": str(tmp_path / "id_ed25519")},
        },
        "containers": containers,
    }
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_inventory(path)


class Counting:
    """Logins (new API clients) and listings a command sends, and how many PVE steps ran at
    once at most."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.logins = self.listings = self.peak = 0
        self._running = 0
        self._lock = threading.Lock()
        login, run = PveClient.for_cluster, StepRunner.run

        def counted_login(inventory: Inventory, cluster: str) -> PveClient:
            with self._lock:
                self.logins += 1
            return login(inventory, cluster)

        def counted_listing(client: PveClient) -> list:  # type: ignore[type-arg]
            with self._lock:
                self.listings += 1
            return list_resources(client)

        def counted_step(runner: StepRunner, step: object) -> None:
            with self._lock:
                self._running += 1
                self.peak = max(self.peak, self._running)
            try:
                run(runner, step)  # type: ignore[arg-type]
            finally:
                with self._lock:
                    self._running -= 1

        monkeypatch.setattr(PveClient, "for_cluster", counted_login)
        monkeypatch.setattr("dflashops.proxmox.clusters.list_resources", counted_listing)
        monkeypatch.setattr(StepRunner, "run", counted_step)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Counting:
    return Counting(monkeypatch)


def test_a_fleet_is_created_at_once_and_a_refused_one_stops_no_other(
    inventory: Inventory, double: PveDouble, counting: Counting
) -> None:
    client = PveClient(inventory.clusters["lab"], inventory.secret("lab"))
    # f3's vmid holds someone else's container: refused, never touched
    upid = client.post(
        "nodes/lab/lxc", vmid=962, ostemplate=TEMPLATE, hostname="other", storage="local-lvm"
    )
    client.wait_task(upid, timeout_s=30)
    counting.logins = 0
    said: list[str] = []
    # auto vmids from 960 up: f1..f4's own 960..963 are skipped though not created yet
    options = ProvisionOptions(guest=False, lock_wait_s=20, address_timeout_s=5, vmid_floor=960)
    report = provision(inventory, options=options, progress=said.append)
    assert [c.name for c in report.containers] == list(NAMES)  # inventory order
    assert [c.name for c in report.containers if not c.ok] == ["f3"]
    assert report.failures == ["f3 (vmid 962): refused: vmid 962 is named 'other', not 'f3'"]
    assert counting.logins == 1  # one API session for the whole command
    assert counting.peak > 1  # PVE steps of several containers ran at once
    made = {r.name: r for r in list_resources(client) if r.name in NAMES}
    assert sorted(made) == ["f1", "f2", "f4", "f5", "f6"]
    assert {made[n].node for n in ("f1", "f5")} == {"lab"}
    assert {made[n].node for n in ("f2", "f4", "f6")} == {"lab2"}
    # the two auto creates got a vmid each, none taken twice, no "just taken" retry
    assert sorted((made["f5"].vmid, made["f6"].vmid)) == [964, 965]
    assert not any("was just taken" in line for line in said)
    assert all(made[n].status == "running" for n in made)
    # one line per container, said as each finished (in the order they finish)
    finished = [line for line in said if line.startswith(("f1: created", "f3: failed"))]
    assert sorted(finished) == [
        "f1: created (vmid 960, node lab, 10.200.99.60)",
        "f3: failed: refused: vmid 962 is named 'other', not 'f3'",
    ]


def test_an_unchanged_fleet_reads_pve_once_per_phase(
    inventory: Inventory, counting: Counting
) -> None:
    names = ["f1", "f2", "f3", "f4"]
    assert provision(inventory, names, options=API_ONLY).ok
    counting.logins = counting.listings = 0
    report = provision(inventory, names, options=API_ONLY)
    assert report.ok and [c.result_line().split(" (")[0] for c in report.containers] == [
        f"{name}: unchanged" for name in names
    ]
    # one login; one listing to plan from, one when the apply starts (what the plan saw may
    # have changed while it was shown)
    assert (counting.logins, counting.listings) == (1, 2)


def test_status_and_destroy_read_the_listing_once(inventory: Inventory, counting: Counting) -> None:
    names = ["f1", "f2", "f3", "f4"]
    assert provision(inventory, names, options=API_ONLY).ok
    counting.logins = counting.listings = 0
    rows = container_status(inventory, [*names, "f5"])
    assert [(r.name, r.state) for r in rows] == [
        ("f1", "running"),
        ("f2", "running"),
        ("f3", "running"),
        ("f4", "running"),
        ("f5", "absent"),
    ]
    assert (counting.logins, counting.listings) == (1, 1)
    counting.logins = counting.listings = 0
    results = destroy(inventory, ["f4", "f2", "f5", "f1"], lock_wait_s=10, parallel=4)
    assert [(r.name, r.outcome) for r in results] == [
        ("f4", "destroyed"),
        ("f2", "destroyed"),
        ("f5", "absent"),
        ("f1", "destroyed"),
    ]
    assert (counting.logins, counting.listings) == (1, 1)
    assert [r.state for r in container_status(inventory, names)] == [
        "absent",
        "absent",
        "running",
        "absent",
    ]
