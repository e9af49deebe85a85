"""The deployment contract: the playbook of a container, the manifest model, the API key and the
container → connection path (pure parts; reading and writing over SSH is covered by the launch
and bench integration tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.deployment.access import connect, server_address
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.manifest import DeployedManifest
from dflashops.deployment.playbooks import (
    optional_container_playbook,
    playbook_for_container,
    playbooks_naming,
)
from dflashops.errors import DflashopsError, PlaybookError, SecretError, UnknownNameError
from dflashops.inventory.load import load_inventory
from tests.support.manifests import deployed_manifest

REPO = Path(__file__).resolve().parents[2]


def test_the_one_playbook_naming_a_container(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("name: a\ncontainer: ct1\n")
    (tmp_path / "b.yaml").write_text("name: b\ncontainer: ct2\n")
    (tmp_path / "c.yaml").write_text("name: c\ncontainer: ct2\n")
    (tmp_path / "broken.yaml").write_text("{: nope")
    assert playbook_for_container("ct1", folders=[tmp_path]) == tmp_path / "a.yaml"
    with pytest.raises(PlaybookError, match="2 playbooks"):
        playbook_for_container("ct2", folders=[tmp_path])
    with pytest.raises(PlaybookError, match="no playbook in playbooks/ name container ct9"):
        playbook_for_container("ct9", folders=[tmp_path])
    assert playbooks_naming("lab-ct1", [REPO / "playbooks"]) == [
        REPO / "playbooks" / "lab-dflash.yaml"
    ]


def test_a_local_playbook_hides_the_shipped_one_of_the_same_name(tmp_path: Path) -> None:
    (tmp_path / "first").mkdir()
    (tmp_path / "second").mkdir()
    (tmp_path / "first" / "x.yaml").write_text("name: x\ncontainer: ct1\n")
    (tmp_path / "second" / "x.yaml").write_text("name: x\ncontainer: ct1\n")
    found = playbooks_naming("ct1", [tmp_path / "first", tmp_path / "second"])
    assert found == [tmp_path / "first" / "x.yaml"]


def test_optional_playbook_is_none_without_a_unique_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # ./playbooks is searched first: keep the repo's out of it
    assert optional_container_playbook("no-such-container") is None
    book = optional_container_playbook("lab-ct1")
    assert book is not None and book.container == "lab-ct1"
    given = optional_container_playbook("anything", "lab-dflash", ["server.port=31000"])
    assert given is not None and given.server.port == 31000


def test_manifest_round_trip_and_engine_command_line() -> None:
    manifest = deployed_manifest(
        spec={"argv": ["vllm", "serve", "m", "--port", "1"], "env": {"A": "1"}, "model": "m"}
    )
    again = DeployedManifest.from_text(manifest.to_bytes().decode())
    assert again == manifest
    assert again.argv == ["vllm", "serve", "m", "--port", "1"] and again.env == {"A": "1"}
    assert deployed_manifest(spec={}).argv == [] and deployed_manifest(spec={}).env == {}


def test_a_file_that_is_not_a_manifest_is_named() -> None:
    with pytest.raises(DflashopsError, match=r"/etc/dflashops/deployed.json: not a dflashops"):
        DeployedManifest.from_text('{"port": 1}', DEFAULT_LAYOUT.manifest)


def test_layout_paths_follow_their_roots() -> None:
    layout = Layout(etc="/e", state="/s", log_dir="/l", opt="/o")
    assert (layout.manifest, layout.spec, layout.log) == (
        "/e/deployed.json",
        "/e/server.json",
        "/l/server.log",
    )
    assert layout.venv("vllm", "0.32.0") == "/o/venv-vllm-0.32.0"


def test_api_key_only_from_the_named_variable() -> None:
    assert server_api_key(None, {"VLLM_API_KEY": "x"}, whose="w") is None
    assert server_api_key("K", {"K": "s3cret"}, whose="w") == "s3cret"
    for environ in ({}, {"K": ""}):
        with pytest.raises(SecretError, match=r"w wants an API key from \$K") as caught:
            server_api_key("K", environ, whose="w")
        assert "s3cret" not in str(caught.value)


INVENTORY = """\
version: 1
clusters:
  c:
    api_url: https://127.0.0.1:8006
    auth: {user: root@pam, password: {env: PVE_PASSWORD}}
    nodes: {n: {ssh: {host: 127.0.0.1}}}
containers:
  static: {vmid: 101, network: {ip: 10.200.1.5/24}}
  by-ssh: {vmid: 102, network: {ip: dhcp}, ssh: {host: 10.200.1.6}}
  nowhere: {vmid: 103, network: {ip: dhcp}}
"""


def test_connect_names_the_container_and_refuses_what_has_no_address(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    inventory = load_inventory(path).without_pve_check()  # no PVE here: the SSH side only
    access = connect(inventory, "static")
    assert (access.name, access.address, access.conn.host) == ("static", "10.200.1.5", "10.200.1.5")
    assert connect(inventory, "by-ssh", host="10.200.1.7").address == "10.200.1.7"
    assert server_address(inventory.container("by-ssh")) == "10.200.1.6"
    with pytest.raises(DflashopsError, match=r"nowhere has no static address and no ssh\.host"):
        connect(inventory, "nowhere")
    with pytest.raises(UnknownNameError, match="no container named 'typo'"):
        connect(inventory, "typo")
