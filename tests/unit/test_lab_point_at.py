"""The lab is never the default inventory (issue 31): `lab up` and `lab status` say how every other
command reaches it. The lab itself is canned here; tests/integration/test_lab.py runs a real one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.lab.control import LabStatus


@pytest.fixture
def running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LabStatus:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("version: 1\n")
    status = LabStatus(
        running=True,
        state_dir=str(tmp_path),
        inventory=str(inventory),
        pid=4242,
        api_url="https://127.0.0.1:8006/api2/json",
        ca_file=str(tmp_path / "ca.pem"),
    )

    def lab_up(**_: Any) -> LabStatus:
        return status

    monkeypatch.setattr("dflashops.lab.control.lab_up", lab_up)
    monkeypatch.setattr("dflashops.lab.control.lab_status", lambda: status)
    return status


@pytest.mark.parametrize("command", ["up", "status"])
def test_the_lab_says_how_to_point_at_it(running: LabStatus, command: str) -> None:
    result = CliRunner().invoke(cli, ["lab", command], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    last = result.stdout.splitlines()[-1]
    assert last == (
        f"use the lab: dflashops -i {running.inventory} COMMAND, "
        f"or export DFLASHOPS_INVENTORY={running.inventory}"
    )
