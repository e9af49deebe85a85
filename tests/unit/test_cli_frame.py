"""The CLI frame: exit codes, one-line errors, --json purity, fast --help, layering."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from dflashops import __version__
from dflashops.cli import COMMANDS, LISTED, cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = str(REPO / "inventory" / "example.yaml")


def test_version() -> None:
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert __version__ in result.output


def test_every_registered_command_loads_and_has_help() -> None:
    runner = CliRunner()
    for name in COMMANDS:
        result = runner.invoke(cli, [name, "--help"])
        assert result.exit_code == 0, (name, result.output)
        assert "Usage:" in result.output


def test_inventory_show_json_is_one_document_with_secrets_redacted() -> None:
    result = CliRunner().invoke(
        cli, ["-i", EXAMPLE, "inventory", "show", "--json"], env={"PVE_PASSWORD": "topsecret"}
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    auth = data["clusters"]["home"]["auth"]
    assert auth["password"] == {"env": "PVE_PASSWORD", "file": None}
    assert "topsecret" not in result.stdout
    assert data["containers"]["qwen36"]["vmid"] == 129


def test_inventory_from_env_var_and_table() -> None:
    result = CliRunner().invoke(cli, ["inventory", "show"], env={"DFLASHOPS_INVENTORY": EXAMPLE})
    assert result.exit_code == 0, result.output
    assert "qwen36" in result.output


def test_config_error_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nclusters: {}\n")
    result = CliRunner().invoke(cli, ["-i", str(bad), "inventory", "show"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {bad}:2:clusters:")
    assert "Traceback" not in result.output


def test_missing_secret_exit_2_names_key() -> None:
    result = CliRunner().invoke(
        cli, ["-i", EXAMPLE, "inventory", "check"], env={"PVE_PASSWORD": ""}
    )
    assert result.exit_code == 2
    assert ":16:clusters.home.auth.password: environment variable PVE_PASSWORD" in result.stderr


def test_debug_shows_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 2\n")
    result = CliRunner().invoke(cli, ["--debug", "-i", str(bad), "inventory", "show"])
    assert result.exit_code == 1
    assert result.exception is not None
    assert type(result.exception).__name__ == "InventoryError"


def test_no_inventory_hint(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The lab's inventory is never a default, even where `lab up` wrote one: an operator's
    command must not reach the lab by accident."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DFLASHOPS_LAB_STATE", str(tmp_path / "lab"))
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "inventory.yaml").write_text(Path(EXAMPLE).read_text())
    monkeypatch.delenv("DFLASHOPS_INVENTORY", raising=False)
    result = CliRunner().invoke(cli, ["inventory", "show"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ./inventory.yaml: no such file")
    assert all(
        word in line for word in ("-i FILE", "DFLASHOPS_INVENTORY", "inventory/example.yaml")
    )
    (tmp_path / "inventory.yaml").write_text(Path(EXAMPLE).read_text())
    assert CliRunner().invoke(cli, ["inventory", "show"], env={"PVE_PASSWORD": "x"}).exit_code == 0


HEAVY = ("proxmoxer", "fabric", "paramiko", "httpx", "pydantic", "yaml", "rich", "jinja2", "torch")


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}; import sys; print(sorted(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ).stdout
    return set(json.loads(out.splitlines()[-1].replace("'", '"')))


def test_help_imports_nothing_heavy() -> None:
    """`dflashops --help` must stay fast (benchmarks/cli_startup.py: within 1.5x of importing
    click): it imports click and the group's own module, no command module, nothing heavy."""
    loaded = _modules_after("from dflashops.cli import cli; cli(['--help'], standalone_mode=False)")
    assert not {name.split(".")[0] for name in loaded} & set(HEAVY)
    ours = sorted(name for name in loaded if name.startswith("dflashops"))
    assert ours == ["dflashops", "dflashops.cli", "dflashops.cli.options"]
    # beyond what importing click loads here: 4 ms and 2 ms of a 50 ms start
    added = loaded - _modules_after("import click")
    assert "pathlib" not in added and "json" not in added


def _listed_entry(command: click.Command) -> dict[str, object]:
    """What LISTED must hold for COMMAND: Click lists a short_help whole, else the first
    sentence of the help's first paragraph, cut to the width."""
    entry: dict[str, object] = {}
    if command.short_help:
        entry["short_help"] = command.short_help
    else:
        words = (command.help or "").partition("\n\n")[0].split()
        words = words[1:] if words[:1] == ["\b"] else words
        for index, word in enumerate(words):
            if word.endswith(".") and (
                index == len(words) - 1 or not words[index + 1][0].islower()
            ):
                words = words[: index + 1]
                break
        entry["help"] = " ".join(words)
    if command.hidden:
        entry["hidden"] = True
    if command.deprecated:
        entry["deprecated"] = command.deprecated
    return entry


def test_every_command_is_listed_as_it_describes_itself() -> None:
    """--help lists the commands from LISTED without importing them: each entry must say what
    the command's own help says (the message is the entry to paste into dflashops/cli)."""
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        wanted = _listed_entry(command)
        assert LISTED.get(name) == wanted, (
            f"LISTED in dflashops/cli/__init__.py: {name!r}: {wanted!r}"
        )
    assert set(LISTED) <= set(COMMANDS)


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
def test_help_lists_commands_as_importing_them_would(width: int) -> None:
    """The listing from LISTED is, to the character, Click's listing of the imported commands."""
    ctx = click.Context(cli, info_name="dflashops", terminal_width=width, max_content_width=width)
    ours = ctx.make_formatter()
    cli.format_commands(ctx, ours)
    eager = ctx.make_formatter()
    click.Group.format_commands(cli, ctx, eager)
    assert ours.getvalue() == eager.getvalue()
    assert "inventory" in ours.getvalue() and "lab" in ours.getvalue()


def test_only_cli_imports_click() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "dflashops").rglob("*.py")
        if "cli" not in path.relative_to(REPO / "dflashops").parts
        and any(
            line.startswith(("import click", "from click"))
            for line in path.read_text().splitlines()
        )
    ]
    assert offenders == []
