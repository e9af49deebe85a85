"""A placement member under systemd is never restarted alone: its ranks cannot rejoin a running
group (``launch`` restarts the whole group). The unit says ``Restart=no``; ``StartLimitBurst=0``
alone would not do it (systemd reads a zero burst as "no limit", so ``Restart=on-failure`` would
restart the member forever). The single-container units keep their restart policy.

Snapshots: tests/fixtures/launch/snapshots/members/ (a subfolder: test_templates.py owns the
folder's top level). Regenerate with ``DFLASHOPS_UPDATE_SNAPSHOTS=1`` and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.launch.members import render_member
from dflashops.launch.placement import resolve_members
from dflashops.launch.render import Rendered, RenderInputs, render
from dflashops.playbook.models import Playbook
from tests.support.inventories import PLACEMENT_INVENTORY as INVENTORY

REPO = Path(__file__).resolve().parents[2]
SNAPSHOTS = REPO / "tests" / "fixtures" / "launch" / "snapshots" / "members"
UPDATE_ENV = "DFLASHOPS_UPDATE_SNAPSHOTS"


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    return load_inventory(path).without_pve_check()


def playbook(placement: bool) -> Playbook:
    data = {
        "name": "multi",
        "model": {"path": "/opt/models/m", "served_name": "m"},
        "engine": {"version": "0.32.0"},
        "server": {"port": 30000},
    }
    if placement:
        data["placement"] = {"members": ["gpu-a", "gpu-b"], "tensor_parallel_size": 4}
    return Playbook.model_validate(data)


INPUTS = RenderInputs(supervisor="systemd", venv_python="/opt/v/bin/python", api_key="k")


def unit_text(rendered: Rendered) -> str:
    return rendered.file(DEFAULT_LAYOUT.unit).content.decode()


def test_every_member_unit_says_restart_no(inventory: Inventory) -> None:
    book = playbook(placement=True)
    members = resolve_members(inventory, book)
    for member in members:
        unit = unit_text(render_member(book, members, member, INPUTS).rendered)
        lines = unit.splitlines()
        assert "Restart=no" in lines, member.name
        restarting = ("Restart=on", "RestartSec", "StartLimit")
        assert not any(line.startswith(restarting) for line in lines)


def test_a_single_container_unit_keeps_restarting_on_failure() -> None:
    lines = unit_text(render(playbook(placement=False), INPUTS)).splitlines()
    assert "Restart=on-failure" in lines
    assert "StartLimitBurst=5" in lines
    assert "Restart=no" not in lines


@pytest.mark.parametrize("rank", [0, 1])
def test_member_unit_matches_snapshot(inventory: Inventory, rank: int) -> None:
    book = playbook(placement=True)
    members = resolve_members(inventory, book)
    text = unit_text(render_member(book, members, members[rank], INPUTS).rendered)
    path = SNAPSHOTS / f"vllm-member-rank{rank}-systemd.service"
    if os.environ.get(UPDATE_ENV):
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"no snapshot {path.name}; run with {UPDATE_ENV}=1 and review it"
    assert text == path.read_text(encoding="utf-8")
