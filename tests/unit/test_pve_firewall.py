"""A placement's members and the PVE firewall (issue 24): launch lets the members reach each
other where a member's firewall is on, converges on a rerun, follows an address change, and
never touches the operator's own rules. Against the PVE double in this process (real proxmoxer
over verified HTTPS), which keeps the rules in ``<etc_pve>/firewall/<vmid>.fw`` as PVE does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from dflashops.deployment.managed import ManagedCheck, confirm_managed
from dflashops.errors import ProxmoxError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab.pve import PveDouble, serve_double
from dflashops.launch.firewall import (
    EPHEMERAL,
    MemberFirewall,
    PortsPlan,
    plan_member_ports,
    rule_mark,
)
from dflashops.launch.placement import Member
from dflashops.playbook.placement import Placement
from dflashops.proxmox.apply import ProvisionOptions, provision
from dflashops.proxmox.client import PveClient
from tests.support.inventories import double_cluster

pytestmark = pytest.mark.timeout(120)
TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl t@dfo"
API_ONLY = ProvisionOptions(guest=False, lock_wait_s=20, address_timeout_s=5, vmid_floor=950)
HEAD, WORKER = "10.200.99.60", "10.200.99.61"
PLACEMENT = Placement(members=["c1", "c2"], tensor_parallel_size=2)
BOOK = "lab-multinode"
OPERATOR_RULE = {"type": "in", "action": "ACCEPT", "proto": "tcp", "dport": "22",
                 "comment": "ssh from the office", "enable": 1}  # fmt: skip


@pytest.fixture(scope="module")
def double(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PveDouble]:
    root = tmp_path_factory.mktemp("fw")
    with serve_double(root / "pve", create_delay=0.05, task_delay=0.01) as running:
        yield running


@pytest.fixture(scope="module")
def inventory(double: PveDouble, tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    tmp = tmp_path_factory.mktemp("inv")
    (tmp / "id_ed25519.pub").write_text(KEY + "\n")
    doc = {
        "clusters": {"lab": double_cluster(double, tmp)},
        "defaults": {
            "template": TEMPLATE,
            "ssh": {"key_file": str(tmp / "id_ed25519")},
        },
        "containers": {
            "c1": {"vmid": 960, "network": {"ip": f"{HEAD}/24", "gateway": "10.200.99.1"}},
            "c2": {"vmid": 961, "network": {"ip": f"{WORKER}/24", "gateway": "10.200.99.1"}},
        },
    }
    path = tmp / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    loaded = load_inventory(path)
    assert provision(loaded, ["c1", "c2"], options=API_ONLY).ok
    return loaded


@pytest.fixture
def client(inventory: Inventory, double: PveDouble) -> Iterator[PveClient]:
    pve = PveClient.for_cluster(inventory, "lab")
    yield pve
    for vmid in (960, 961):  # each test starts from no firewall file
        (double.etc_pve / "firewall" / f"{vmid}.fw").unlink(missing_ok=True)


def members(worker: str = WORKER) -> list[Member]:
    return [Member("c1", 0, HEAD, 1), Member("c2", 1, worker, 1)]


def checks(inventory: Inventory) -> dict[str, ManagedCheck]:
    return {name: confirm_managed(inventory, name) for name in ("c1", "c2")}


def rules(client: PveClient, vmid: int) -> list[dict[str, object]]:
    got = client.get(client.ct_path("lab", vmid, "firewall", "rules"))
    return [{k: v for k, v in r.items() if k not in ("pos", "digest")} for r in got]


def enable(client: PveClient, vmid: int) -> None:
    client.put(client.ct_path("lab", vmid, "firewall", "options"), enable=1)


def open_member_ports(
    inventory: Inventory,
    placement: Placement,
    group: list[Member],
    found: dict[str, ManagedCheck],
    *,
    playbook: str,
    apply: bool,
) -> list[MemberFirewall | PortsPlan]:
    """The plan (a dry run shows its lines), applied when ``apply``."""
    plans = plan_member_ports(inventory, placement, group, found, playbook=playbook)
    return [plan.applied() if apply else plan for plan in plans]


def open_ports(inventory: Inventory, *, apply: bool, worker: str = WORKER) -> dict[str, str]:
    found = open_member_ports(
        inventory, PLACEMENT, members(worker), checks(inventory), playbook=BOOK, apply=apply
    )
    return {f.name: f.line for f in found}


def test_a_member_whose_firewall_is_off_gets_nothing(
    inventory: Inventory, client: PveClient
) -> None:
    lines = open_ports(inventory, apply=True)
    assert lines["c1"] == "PVE firewall off: nothing to allow (tcp 29501, tcp 1024:65535)"
    assert lines["c2"] == "PVE firewall off: nothing to allow (tcp 1024:65535)"
    assert rules(client, 960) == [] and rules(client, 961) == []


def test_rules_are_added_once_and_the_operators_stay(
    inventory: Inventory, client: PveClient, double: PveDouble
) -> None:
    enable(client, 960)
    enable(client, 961)
    client.post(client.ct_path("lab", 960, "firewall", "rules"), **OPERATOR_RULE)
    dry = open_ports(inventory, apply=False)
    assert "2 rule(s) to add" in dry["c1"] and "1 rule(s) to add" in dry["c2"]
    assert len(rules(client, 960)) == 1  # a dry run writes nothing

    open_ports(inventory, apply=True)
    mark = rule_mark(BOOK)
    head = rules(client, 960)
    assert head[:2] == [
        {"type": "in", "action": "ACCEPT", "proto": "tcp", "source": WORKER, "dport": "29501",
         "comment": f"{mark} native rendezvous", "enable": 1},
        {"type": "in", "action": "ACCEPT", "proto": "tcp", "source": WORKER, "dport": EPHEMERAL,
         "comment": f"{mark} message queues, Gloo/NCCL (ephemeral)", "enable": 1},
    ]  # fmt: skip
    assert {k: head[2].get(k) for k in OPERATOR_RULE} == OPERATOR_RULE
    worker = rules(client, 961)
    assert [(r["source"], r["dport"]) for r in worker] == [(HEAD, EPHEMERAL)]
    fw_file = (double.etc_pve / "firewall" / "960.fw").read_text()
    assert f"IN ACCEPT -source {WORKER} -p tcp -dport 29501 # {mark} native rendezvous" in fw_file

    before = fw_file
    again = open_ports(inventory, apply=True)
    assert again["c1"].startswith("PVE firewall on: members allowed")
    assert (double.etc_pve / "firewall" / "960.fw").read_text() == before  # nothing rewritten


def test_an_address_change_replaces_only_dflashops_rules(
    inventory: Inventory, client: PveClient
) -> None:
    enable(client, 960)
    client.post(client.ct_path("lab", 960, "firewall", "rules"), **OPERATOR_RULE)
    open_ports(inventory, apply=True)
    moved = "10.200.99.62"
    line = open_ports(inventory, apply=True, worker=moved)["c1"]
    assert "2 rule(s) added, 2 stale removed" in line
    head = rules(client, 960)
    assert [r.get("source") for r in head[:2]] == [moved, moved]
    assert len(head) == 3 and head[2]["comment"] == "ssh from the office"


def test_names_and_a_skipped_check_are_said_not_guessed(
    inventory: Inventory, client: PveClient
) -> None:
    enable(client, 960)
    named = open_member_ports(
        inventory,
        PLACEMENT,
        [Member("c1", 0, HEAD, 1), Member("c2", 1, "c2.lab", 1)],
        checks(inventory),
        playbook=BOOK,
        apply=True,
    )
    assert all(f.problem and "c2 (c2.lab)" in f.line for f in named)
    skipped = {name: ManagedCheck(name, None, None, skipped=True) for name in ("c1", "c2")}
    found = open_member_ports(inventory, PLACEMENT, members(), skipped, playbook=BOOK, apply=True)
    assert [f.line for f in found] == ["PVE firewall not read (--skip-pve-check)"] * 2
    assert rules(client, 960) == []


def test_the_double_checks_a_rule_as_pve_does(client: PveClient) -> None:
    path = client.ct_path("lab", 960, "firewall", "rules")
    with pytest.raises(ProxmoxError):
        client.post(path, type="sideways", action="ACCEPT")
    with pytest.raises(ProxmoxError):
        client.post(client.ct_path("lab", 999, "firewall", "rules"), type="in", action="ACCEPT")
