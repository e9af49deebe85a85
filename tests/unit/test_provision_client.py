"""PveClient's lock waits, digest conflicts and task errors, and provision's API part, against
the PVE double in this process (real proxmoxer over verified HTTPS; no root, no SSH)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dflashops.errors import ProxmoxError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab.pve import PveDouble, serve_double
from dflashops.proxmox.apply import (
    ProvisionOptions,
    ProvisionRequest,
    apply_provision,
    plan_provision,
    provision,
)
from dflashops.proxmox.client import PveClient, is_digest_conflict
from dflashops.proxmox.containerplan import ContainerPlan, PlanInputs
from dflashops.proxmox.identity import list_resources
from dflashops.proxmox.lifecycle import (
    DestroyResult,
    container_status,
    destroy,
)
from dflashops.proxmox.plan import plan_container
from tests.support.inventories import double_cluster

pytestmark = pytest.mark.timeout(120)
TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl t@dfo"
API_ONLY = ProvisionOptions(guest=False, lock_wait_s=20, address_timeout_s=5, vmid_floor=950)


@pytest.fixture
def double(tmp_path: Path) -> Iterator[PveDouble]:
    with serve_double(tmp_path / "pve", create_delay=0.1, task_delay=0.01) as running:
        yield running


@pytest.fixture
def inventory(double: PveDouble, tmp_path: Path) -> Inventory:
    (tmp_path / "id_ed25519.pub").write_text(KEY + "\n")
    doc = {
        "clusters": {"lab": double_cluster(double, tmp_path)},
        "defaults": {
            "template": TEMPLATE,
            "cores": 2,
            "memory_mb": 1024,
            "rootfs_gb": 8,
            "ssh": {"key_file": str(tmp_path / "id_ed25519")},
        },
        "containers": {
            "c1": {"vmid": 960, "network": {"ip": "10.200.99.60/24", "gateway": "10.200.99.1"}},
            "c2": {"vmid": "auto", "network": {"ip": "10.200.99.61/24"}},
        },
    }
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_inventory(path)


@pytest.fixture
def client(inventory: Inventory) -> PveClient:
    return PveClient.for_cluster(inventory, "lab")


def conf_file(double: PveDouble, vmid: int) -> Path:
    return double.etc_pve / "nodes" / "lab" / "lxc" / f"{vmid}.conf"


def set_lock(double: PveDouble, vmid: int, lock: str | None) -> None:
    path = conf_file(double, vmid)
    lines = [line for line in path.read_text().splitlines() if not line.startswith("lock:")]
    if lock:
        lines.insert(0, f"lock: {lock}")
    path.write_text("\n".join(lines) + "\n")


def create(client: PveClient, vmid: int) -> None:
    upid = client.post(
        "nodes/lab/lxc",
        vmid=vmid,
        ostemplate=TEMPLATE,
        hostname=f"t{vmid}",
        tags="dflashops",
        storage="local-lvm",
    )
    client.wait_task(upid, timeout_s=30)


def test_update_waits_for_a_lock_then_succeeds(double: PveDouble, client: PveClient) -> None:
    create(client, 961)
    set_lock(double, 961, "backup")
    timer = threading.Timer(1.0, set_lock, (double, 961, None))
    timer.start()
    seen: list[str] = []
    started = time.monotonic()
    client.ct_update("lab", 961, {"cores": 3}, lock_wait_s=15, progress=seen.append)
    timer.join()
    assert time.monotonic() - started >= 0.9
    assert client.ct_config("lab", 961)["cores"] == 3
    assert seen and "CT is locked (backup)" in seen[0]


def test_lock_wait_is_bounded(double: PveDouble, client: PveClient) -> None:
    create(client, 962)
    set_lock(double, 962, "snapshot")
    started = time.monotonic()
    with pytest.raises(ProxmoxError, match=r"still locked after 1s") as info:
        client.ct_update("lab", 962, {"cores": 3}, lock_wait_s=1)
    assert time.monotonic() - started < 5
    assert info.value.hint is not None and "pct unlock" in info.value.hint


def test_stale_digest_is_a_conflict(client: PveClient) -> None:
    create(client, 963)
    digest = client.ct_config("lab", 963)["digest"]
    client.ct_update("lab", 963, {"cores": 4}, digest=digest)
    with pytest.raises(ProxmoxError) as info:
        client.ct_update("lab", 963, {"cores": 5}, digest=digest)
    assert is_digest_conflict(info.value)


def test_start_task_failing_on_a_lock_is_retried(double: PveDouble, client: PveClient) -> None:
    create(client, 964)
    set_lock(double, 964, "backup")
    threading.Timer(1.0, set_lock, (double, 964, None)).start()
    result = client.run_task(
        "start", lambda: str(client.post("nodes/lab/lxc/964/status/start")), lock_wait_s=15
    )
    assert result.ok and client.ct_status("lab", 964)["status"] == "running"


def test_failed_task_reports_its_log(client: PveClient) -> None:
    upid = client.post(
        "nodes/lab/lxc",
        vmid=965,
        ostemplate="local:vztmpl/none_1_amd64.tar.zst",
        hostname="x",
        storage="local-lvm",
    )
    with pytest.raises(ProxmoxError, match=r"does not exist") as info:
        client.wait_task(upid, timeout_s=30)
    assert info.value.task_log and "TASK ERROR" in info.value.task_log[-1]


def test_provision_api_part_is_idempotent(inventory: Inventory, client: PveClient) -> None:
    first = provision(inventory, ["c1", "c2"], options=API_ONLY)
    assert first.ok, first.failures
    assert [c.action for c in first.containers] == ["create", "create"]
    assert first.container("c1").address == "10.200.99.60"
    digests = {c.vmid: client.ct_config("lab", c.vmid or 0)["digest"] for c in first.containers}
    again = provision(inventory, ["c1", "c2"], options=API_ONLY)
    assert again.ok and [c.action for c in again.containers] == ["unchanged", "unchanged"]
    assert all(not c.applied for c in again.containers)
    assert digests == {
        c.vmid: client.ct_config("lab", c.vmid or 0)["digest"] for c in again.containers
    }
    config = client.ct_config("lab", 960)
    assert config["tags"] == "dflashops" and config["features"] == "nesting=1"
    assert config["net0"].startswith("name=eth0,bridge=vmbr0,gw=10.200.99.1")


def test_drift_is_repaired_with_the_digest(inventory: Inventory, client: PveClient) -> None:
    assert provision(inventory, ["c1"], options=API_ONLY).ok
    client.ct_update("lab", 960, {"cores": 7, "features": "keyctl=1"})
    dry = provision(inventory, ["c1"], dry_run=True, options=API_ONLY)
    entry = dry.container("c1")
    assert entry.action == "change" and any("digest" in s for s in entry.steps)
    assert client.ct_config("lab", 960)["cores"] == 7  # a dry run changes nothing
    done = provision(inventory, ["c1"], options=API_ONLY)
    assert done.ok and done.container("c1").action == "change"
    config = client.ct_config("lab", 960)
    assert config["cores"] == 2 and config["features"] == "keyctl=1,nesting=1"


def test_apply_runs_the_shown_plan_without_planning_again(
    inventory: Inventory, client: PveClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert provision(inventory, ["c1"], options=API_ONLY).ok
    client.ct_update("lab", 960, {"cores": 7})
    planned: list[str] = []

    def counting_plan(inputs: PlanInputs) -> ContainerPlan:
        planned.append(inputs.container.name)
        return plan_container(inputs)

    monkeypatch.setattr("dflashops.proxmox.session.plan_container", counting_plan)
    plan = plan_provision(ProvisionRequest(inventory, ("c1",), API_ONLY))
    shown = plan.report().container("c1")
    assert shown.action == "change" and planned == ["c1"]
    report = apply_provision(plan)
    entry = report.container("c1")
    assert report.ok and not report.dry_run and planned == ["c1"]  # planned once, applied once
    assert entry.applied == shown.steps
    assert client.ct_config("lab", 960)["cores"] == 2


def test_apply_plans_again_when_the_config_changed_after_planning(
    inventory: Inventory, client: PveClient
) -> None:
    assert provision(inventory, ["c1"], options=API_ONLY).ok
    client.ct_update("lab", 960, {"cores": 7})
    plan = plan_provision(ProvisionRequest(inventory, ("c1",), API_ONLY))
    client.ct_update("lab", 960, {"memory": 2048})  # an operator, after the plan was shown
    entry = apply_provision(plan).container("c1")
    assert entry.error is None
    assert entry.applied[0] == "replanned: CT 960 config changed since planning"
    config = client.ct_config("lab", 960)
    assert (config["cores"], config["memory"]) == (2, 1024)


def test_apply_waits_out_a_lock_seen_while_planning(
    inventory: Inventory, double: PveDouble
) -> None:
    assert provision(inventory, ["c1"], options=API_ONLY).ok
    set_lock(double, 960, "backup")
    plan = plan_provision(ProvisionRequest(inventory, ("c1",), API_ONLY))
    assert "locked (backup): apply waits for the lock" in plan.report().container("c1").warnings
    timer = threading.Timer(1.0, set_lock, (double, 960, None))
    timer.start()
    said: list[str] = []
    entry = apply_provision(plan, progress=said.append).container("c1")
    timer.join()
    assert entry.error is None and entry.action == "unchanged"
    assert entry.applied == ["replanned: vmid 960 was locked (backup) while planning"]
    assert any("vmid 960 is locked (backup); waiting" in line for line in said)


def test_untagged_namesake_is_refused_and_untouched(
    inventory: Inventory, client: PveClient, double: PveDouble
) -> None:
    upid = client.post(
        "nodes/lab/lxc", vmid=966, ostemplate=TEMPLATE, hostname="c2", storage="local-lvm"
    )
    client.wait_task(upid, timeout_s=30)
    before = conf_file(double, 966).read_bytes()
    report = provision(inventory, ["c2"], options=API_ONLY)
    assert not report.ok
    assert report.failures == [
        "c2: refused: vmid 966 is named 'c2' but lacks the 'dflashops' tag "
        "(not created by dflashops; left untouched)"
    ]
    assert conf_file(double, 966).read_bytes() == before
    assert [r.vmid for r in list_resources(client) if r.name == "c2"] == [966]


def test_status_reads_each_container_as_pve_sees_it(inventory: Inventory) -> None:
    """The PVE part of ``status`` (the server part: dflashops.status, over SSH, in the lab's
    integration tests)."""
    assert provision(inventory, ["c1"], options=API_ONLY).ok
    c1, c2 = container_status(inventory, ["c1", "c2"])
    assert (c1.state, c1.vmid, c1.address, c1.tags) == (
        "running",
        960,
        "10.200.99.60",
        ["dflashops"],
    )
    assert (c2.state, c2.vmid) == ("absent", None)


def test_destroy_removes_managed_and_refuses_strangers(
    inventory: Inventory, client: PveClient, double: PveDouble
) -> None:
    assert provision(inventory, ["c1"], options=API_ONLY).ok
    upid = client.post(
        "nodes/lab/lxc", vmid=967, ostemplate=TEMPLATE, hostname="c2", storage="local-lvm"
    )
    client.wait_task(upid, timeout_s=30)
    asked: list[list[str]] = []

    def confirm(targets: list[DestroyResult]) -> bool:
        asked.append([f"{t.name}:{t.outcome}" for t in targets])
        return True

    results = destroy(inventory, ["c1", "c2"], confirm=confirm, lock_wait_s=10)
    assert asked == [["c1:destroy", "c2:refused"]]
    assert [(r.name, r.outcome) for r in results] == [("c1", "destroyed"), ("c2", "refused")]
    assert not conf_file(double, 960).exists() and conf_file(double, 967).exists()
    again = destroy(inventory, ["c1"], lock_wait_s=10)
    assert [(r.name, r.outcome) for r in again] == [("c1", "absent")]


def test_destroy_rechecks_the_name_right_before_deleting(
    inventory: Inventory, client: PveClient, double: PveDouble
) -> None:
    assert provision(inventory, ["c1"], options=API_ONLY).ok

    def renamed_meanwhile(targets: list[DestroyResult]) -> bool:
        client.ct_update("lab", 960, {"hostname": "someone-else"})
        return True

    (result,) = destroy(inventory, ["c1"], confirm=renamed_meanwhile, lock_wait_s=10)
    assert result.outcome == "failed" and "not destroyed" in str(result.note)
    assert conf_file(double, 960).exists()
