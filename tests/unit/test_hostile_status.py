"""``status`` tells a script when something is wrong (issue 20): a row that could not be read
("error") and a row dflashops refuses to touch ("refused": the inventory's name or vmid holds a
container without the dflashops tag) both exit 1, naming the container; "absent" is a status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.inventory.load import load_inventory
from dflashops.lab.pve import PveDouble, serve_double
from dflashops.proxmox.client import PveClient
from tests.support.inventories import double_cluster

pytestmark = pytest.mark.timeout(120)
TEMPLATE = "local:vztmpl/ubuntu-24.04-standard_24.04-2_amd64.tar.zst"


@pytest.fixture
def double(tmp_path: Path) -> Iterator[PveDouble]:
    with serve_double(tmp_path / "pve", create_delay=0.05, task_delay=0.01) as running:
        yield running


@pytest.fixture
def inventory_path(double: PveDouble, tmp_path: Path) -> Path:
    doc = {
        "clusters": {"lab": double_cluster(double, tmp_path)},
        "defaults": {"template": TEMPLATE},
        "containers": {"ours": {"vmid": 970}, "stranger": {"vmid": "auto"}},
    }
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_refused_row_exits_1_and_absent_row_exits_0(
    double: PveDouble, inventory_path: Path
) -> None:
    # someone else's container carries the inventory's name, without the dflashops tag
    client = PveClient.for_cluster(load_inventory(inventory_path), "lab")
    upid = client.post(
        "nodes/lab/lxc", vmid=971, ostemplate=TEMPLATE, hostname="stranger", storage="local-lvm"
    )
    client.wait_task(upid, timeout_s=30)

    absent = CliRunner().invoke(cli, ["-i", str(inventory_path), "status", "ours", "--json"])
    assert absent.exit_code == 0, absent.output
    assert [row["state"] for row in json.loads(absent.stdout)] == ["absent"]

    result = CliRunner().invoke(cli, ["-i", str(inventory_path), "status", "--json"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    rows = {row["name"]: row["state"] for row in json.loads(result.stdout)}
    assert rows == {"ours": "absent", "stranger": "refused"}
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "1 of 2 container(s) refused as not managed by dflashops: stranger:" in errors[0]
    assert "lacks the 'dflashops' tag" in errors[0]

    table = CliRunner().invoke(cli, ["-i", str(inventory_path), "status"])
    assert table.exit_code == 1 and "refused" in table.stdout
