"""The launch commands' own logic before anything remote: playbook choice and usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli


def _playbook(path: Path, name: str, container: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"version: 1\nname: {name}\ncontainer: {container}\n"
        "model: {path: /models/m}\nengine: {name: vllm, version: 0.32.0}\n"
    )


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inventory.yaml").write_text(
        "version: 1\nclusters:\n  c:\n    api_url: https://127.0.0.1:8006\n"
        "    auth: {user: root@pam, password: {env: NOPE}}\n"
        "    nodes: {n: {ssh: {host: 127.0.0.1}}}\n"
        "containers:\n  ct: {vmid: 100, network: {bridge: vmbr0, ip: 127.0.0.2/8}}\n"
    )
    return tmp_path


def test_the_playbook_naming_the_container_is_used(workdir: Path) -> None:
    from dflashops.cli.launch import _playbook_path

    _playbook(workdir / "playbooks" / "mine.yaml", "mine", "ct")
    _playbook(workdir / "playbooks" / "other.yaml", "other", "elsewhere")
    assert _playbook_path("ct", None) == Path("playbooks") / "mine.yaml"
    assert _playbook_path("ct", "other") == Path("playbooks") / "other.yaml"


def test_no_or_two_matching_playbooks_is_a_usage_error(workdir: Path) -> None:
    runner = CliRunner()
    none = runner.invoke(cli, ["launch", "ct", "--dry-run"])
    assert none.exit_code == 2 and "pass -p PLAYBOOK" in none.output
    _playbook(workdir / "playbooks" / "a.yaml", "a", "ct")
    _playbook(workdir / "playbooks" / "b.yaml", "b", "ct")
    two = runner.invoke(cli, ["launch", "ct", "--dry-run"])
    assert two.exit_code == 2 and "2 playbooks" in two.output


def test_unknown_container_and_bad_override(workdir: Path) -> None:
    _playbook(workdir / "playbooks" / "a.yaml", "a", "ct")
    runner = CliRunner()
    unknown = runner.invoke(cli, ["launch", "nope", "-p", "a", "--dry-run"])
    assert unknown.exit_code == 2 and "nope" in unknown.output
    bad = runner.invoke(cli, ["launch", "ct", "--set", "server.port=0", "--dry-run"])
    assert bad.exit_code == 2 and "--set:server.port" in bad.output


def test_api_key_env_must_be_set(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _playbook(workdir / "playbooks" / "a.yaml", "a", "ct")
    monkeypatch.delenv("MY_KEY", raising=False)
    result = CliRunner().invoke(
        cli, ["launch", "ct", "--set", "server.api_key_env=MY_KEY", "--dry-run"]
    )
    assert result.exit_code == 1
    assert "playbook a wants an API key from $MY_KEY, which is not set" in result.output


@pytest.mark.parametrize("command", ["launch", "stop", "restart", "logs"])
def test_help(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0 and "NAME" in result.output
