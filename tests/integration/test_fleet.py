"""A fleet of containers (issue 36), on a lab of its own (bridge ``dfolabfl0``, 10.200.36.0/24,
vmids 460-463, netns ``dfofl-ct46x``): ``provision``, ``status``, ``up``'s provision step,
``up --dry-run`` and ``destroy`` over four containers across the lab's two nodes at once, as an
operator runs them (stdout and stderr pipes).

One container fails midway: ``fct3``'s known_hosts holds another machine's key for its address
(a container recreated where an old key is still known), so its create and start go through
PVE and its SSH login is refused; the other three are provisioned all the same, the line of each
is in inventory order, the failure's reason is exact and the exit code 1. With the right
known_hosts the rerun converges. Then a crash (:func:`tests.support.faults.kill_host`): PVE
reports the container stopped, and the next ``provision`` starts it again.

Not timed: benchmarks/fleet.py measures.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import paramiko
import pytest

from dflashops.inventory.load import load_inventory
from dflashops.playbook.load import resolve_playbook_path
from dflashops.up.request import UpRequest
from dflashops.up.runner import UpParts, run_up
from dflashops.up.steps import steps_until
from tests.support.faults import kill_host
from tests.support.fleet_lab import FleetLab, Timed, fleet_lab
from tests.support.lab import require_lab

pytestmark = [pytest.mark.root, pytest.mark.timeout(300)]

CIDR = "10.200.36.0/24"  # issue 36
NAMES = ("fct1", "fct2", "fct3", "fct4")
VMID = 460
NODES = ("lab", "lab2", "lab", "lab2")


def progress(done: Timed, description: str) -> list[str]:
    """The finished lines a command wrote to stderr in a pipe, without their prefix."""
    prefix = f"{description}: "
    return [line[len(prefix) :] for line in done.stderr.splitlines() if line.startswith(prefix)]


def fingerprint(kind: str, blob: str) -> str:
    return str(paramiko.PKey.from_type_string(kind, base64.b64decode(blob)).fingerprint)


def known_key(lab: FleetLab, address: str) -> tuple[str, str]:
    """(type, base64 blob) of ``address``'s key in the lab's known_hosts."""
    for line in lab.known_hosts.read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == address:
            return fields[1], fields[2]
    raise AssertionError(f"{address} is not in {lab.known_hosts}")


def where(index: int, lab: FleetLab) -> str:
    return f"vmid {VMID + index}, node {NODES[index]}, {lab.address(index)}"


def in_order(text: str, names: list[str]) -> bool:
    """Whether each name's first mention in ``text`` comes in ``names``' order."""
    found = [m.start() for name in names if (m := re.search(rf"\b{name}\b", text))]
    return len(found) == len(names) and found == sorted(found)


def test_a_fleet_at_once_with_one_container_failing_midway(tmp_path: Path) -> None:
    require_lab()
    names = list(NAMES)
    with fleet_lab(tmp_path, tag="fl", cidr=CIDR) as lab:
        # fct3's known_hosts names its address with the lab node's key
        kind, blob = known_key(lab, f"{lab.net}.2")
        stale = tmp_path / "stale_known_hosts"
        stale.write_text(f"{lab.address(2)} {kind} {blob}\n")
        broken = lab.inventory(
            names,
            first_vmid=VMID,
            parallel=4,
            file="broken.yaml",
            extra={"fct3": {"ssh": {"known_hosts": str(stale)}}},
        )
        fleet = lab.inventory(names, first_vmid=VMID, parallel=4)

        # -- creating four at once: fct3 fails at its login, the others are provisioned
        made = lab.run(broken, "provision", "--yes")
        assert made.returncode == 1, made.stderr
        seen = fingerprint(*known_key(lab, lab.address(2)))  # the key fct3 got when it started
        reason = (
            f"host key {kind} {seen} does not match {stale} (expected {fingerprint(kind, blob)}) "
            "(hint: a changed host key is never accepted; if the host was reinstalled, remove its "
            f"line from {stale})"
        )
        assert progress(made, "planning") == [
            f"{name}: create (vmid {VMID + i}, node {NODES[i]}, 2 steps)"
            for i, name in enumerate(names)
        ]
        assert progress(made, "provisioning") == [
            f"fct1: created ({where(0, lab)})",
            f"fct2: created ({where(1, lab)})",
            f"fct3: failed: {reason}",
            f"fct4: created ({where(3, lab)})",
        ]
        assert made.stderr.splitlines()[-1] == f"error: fct3: {reason}"
        assert in_order(made.stdout, names)  # the report, container by container

        # -- PVE did its part for fct3 too: created and running
        looked = lab.run(fleet, "status", "--json")
        assert looked.returncode == 0, looked.stderr
        rows = json.loads(looked.stdout)
        assert [(r["name"], r["vmid"], r["node"], r["state"]) for r in rows] == [
            (name, VMID + i, NODES[i], "running") for i, name in enumerate(names)
        ]

        # -- the right known_hosts: the rerun converges, nothing else changes
        again = lab.run(fleet, "provision", "--yes")
        assert again.returncode == 0, again.stderr
        assert progress(again, "provisioning") == [
            f"{name}: unchanged ({where(i, lab)})" for i, name in enumerate(names)
        ]

        # -- status: one line per container in inventory order, the table in that order too
        looked = lab.run(fleet, "status")
        assert looked.returncode == 0, looked.stderr
        assert progress(looked, "status") == [
            f"{name}: running ({where(i, lab)})" for i, name in enumerate(names)
        ]
        assert in_order(looked.stdout, names)

        # -- a crash: fct2's every process killed; PVE reports it stopped, provision starts it
        kill_host(lab.container_host(VMID + 1, lab.address(1)))
        rows = json.loads(lab.run(fleet, "status", "--json").stdout)
        assert [r["state"] for r in rows] == ["running", "stopped", "running", "running"]
        healed = lab.run(fleet, "provision", "--yes")
        assert healed.returncode == 0, healed.stderr
        assert progress(healed, "provisioning") == [
            f"fct1: unchanged ({where(0, lab)})",
            f"fct2: changed ({where(1, lab)}, 1 step)",
            f"fct3: unchanged ({where(2, lab)})",
            f"fct4: unchanged ({where(3, lab)})",
        ]

        # -- up: every pair's provision step at once (it writes the pairs' records), then a
        # dry run that reads each container (its PVE check, the drafter's files over SSH)
        state = tmp_path / "up"
        book = resolve_playbook_path("lab-dflash")
        request = UpRequest(playbooks=(book,), containers=NAMES, state_dir=state)
        result = run_up(load_inventory(fleet), request, parts=UpParts(steps_until("provision")))
        assert [(p.container, p.outcome) for p in result.pairs] == [
            (name, "stopped") for name in names
        ]
        pairs = [arg for name in names for arg in ("-c", name)]
        planned = lab.run(
            fleet, "up", "lab-dflash", *pairs, "--dry-run", env={"DFLASHOPS_UP_STATE": str(state)}
        )
        assert planned.returncode == 0, planned.stderr
        titles = re.findall(r"lab-dflash@lab\.(fct\d): plan \(dry run", planned.stdout)
        assert titles == names
        loop = "drafter, launch, smoke, bench, tune, report"
        assert progress(planned, "planning") == [
            f"lab-dflash@lab.{name}: would run {loop}" for name in names
        ]
        assert planned.stdout.count("done ") >= len(names)  # provision: skipped, done before

        # -- destroy: every one at once, the lines in inventory order
        gone = lab.run(fleet, "destroy", "--yes", *names)
        assert gone.returncode == 0, gone.stderr
        assert progress(gone, "destroying") == [
            f"{name} (vmid {VMID + i}) on {NODES[i]}: destroyed" for i, name in enumerate(names)
        ]
