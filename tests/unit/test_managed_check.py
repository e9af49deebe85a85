"""Commands that work inside a container ask PVE first that it is one dflashops manages
(issue 20): what PVE says is judged by the rules provision and destroy use; an unreachable PVE
refuses, naming the override; the override warns. The lab's PVE double covers the live path
(tests/integration/test_provision.py, the untagged namesake)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.deployment.managed import SKIP_FLAG, UnmanagedContainerError, _judge
from dflashops.inventory.load import load_inventory
from dflashops.proxmox.identity import Resource

pytestmark = pytest.mark.timeout(60)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_inventory(tmp_path: Path, vmid: str = "901") -> Path:
    path = tmp_path / "inv.yaml"
    path.write_text(
        "version: 1\n"
        "clusters:\n"
        "  c1:\n"
        f"    api_url: https://127.0.0.1:{closed_port()}\n"
        "    timeout_s: 2\n"
        "    auth: {user: root@pam, password: {env: M_PVE_PW}}\n"
        "    nodes: {n1: {}}\n"
        "containers:\n"
        f"  ct1: {{vmid: {vmid}, ssh: {{host: 127.0.0.1, port: {closed_port()}}}}}\n"
    )
    return path


def resource(vmid: int, name: str, *tags: str) -> Resource:
    return Resource(vmid=vmid, node="n1", name=name, status="running", lock=None, tags=tags)


def test_a_tagged_container_of_the_same_name_and_vmid_is_confirmed(tmp_path: Path) -> None:
    ct = load_inventory(write_inventory(tmp_path)).container("ct1")
    check = _judge(ct, [resource(900, "other"), resource(901, "ct1", "dflashops", "gpu")])
    assert (check.vmid, check.node, check.skipped) == (901, "n1", False)


@pytest.mark.parametrize(
    ("resources", "said"),
    [
        ([resource(901, "ct1")], "ct1: refused, vmid 901 is named 'ct1' but lacks the 'dflashops'"),
        ([resource(901, "db", "dflashops")], "ct1: refused, vmid 901 is named 'db', not 'ct1'"),
        ([resource(905, "ct1", "dflashops")], "ct1: refused, ct1 already exists as vmid 905"),
        ([resource(900, "other", "dflashops")], "ct1 (vmid 901) does not exist in PVE cluster c1"),
    ],
)
def test_anything_else_at_that_name_or_vmid_is_refused(
    tmp_path: Path, resources: list[Resource], said: str
) -> None:
    ct = load_inventory(write_inventory(tmp_path)).container("ct1")
    with pytest.raises(UnmanagedContainerError) as caught:
        _judge(ct, resources)
    assert caught.value.one_line().startswith(said)


@pytest.mark.parametrize("command", [["stop"], ["logs"], ["restart"], ["logs", "-f"]])
def test_an_unreachable_pve_refuses_and_names_the_override(
    tmp_path: Path, command: list[str]
) -> None:
    path = write_inventory(tmp_path)
    result = CliRunner().invoke(cli, ["-i", str(path), *command, "ct1"], env={"M_PVE_PW": "pw"})
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: cannot confirm that ct1 is a container dflashops manages")
    assert "cluster c1: PVE: login:" in line and f"pass {SKIP_FLAG} to act on 127.0.0.1" in line
    assert "pw" not in result.stderr.replace("pwd", "")


def test_the_override_warns_and_goes_on_to_the_inventory_address(tmp_path: Path) -> None:
    path = write_inventory(tmp_path)
    result = CliRunner().invoke(
        cli, ["-i", str(path), "stop", "ct1", SKIP_FLAG], env={"M_PVE_PW": "pw"}
    )
    assert result.exit_code == 1, result.output  # nothing listens on the SSH port
    warning, error = result.stderr.strip().splitlines()
    assert warning.startswith(f"warning: {SKIP_FLAG}: acting on ct1 (127.0.0.1) without asking")
    assert error.startswith("error: ") and "cannot confirm" not in error


@pytest.mark.parametrize(
    "command",
    [
        ["launch"],
        ["stop"],
        ["restart"],
        ["logs"],
        ["bench"],
        ["tune"],
        ["compare"],
        ["drafter", "push"],
        ["drafter", "train"],
    ],
)
def test_every_command_that_reaches_a_container_offers_the_override(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert SKIP_FLAG in result.output
