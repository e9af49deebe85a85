"""The CLI boundary (issue 20): whatever escapes a command is one line and exit 1 (2 for bad
input), ``--debug`` keeps the traceback; unreadable secret and CA files name the file; ``status``
fails when a row failed; ``--json`` is strict JSON; long error text is cut at a word."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from dflashops.cli import LazyGroup, cli
from dflashops.cli.context import AppContext, dump_json
from dflashops.errors import shorten
from tests.support.inventories import write_inventory

pytestmark = pytest.mark.timeout(60)
PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "lab-dflash.yaml"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={"G_PVE_PW": "pw", **(env or {})})


def assert_one_line(result: Result, code: int, *needles: str) -> str:
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


# ---------------------------------------------------------------- a missing ca_file


@pytest.mark.parametrize(
    "command",
    [["status"], ["provision", "--dry-run"], ["destroy", "ct1", "--yes"]],
    ids=["status", "provision", "destroy"],
)
def test_missing_ca_file_is_one_line_naming_it(tmp_path: Path, command: list[str]) -> None:
    ca = tmp_path / "no-such-ca.pem"
    inv = write_inventory(tmp_path, f"ca_file: {ca}")
    result = run("-i", str(inv), *command)
    assert_one_line(result, 1, f"ca_file {ca}", "cannot be read")


def test_missing_ca_file_with_debug_keeps_the_exception(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, f"ca_file: {tmp_path / 'none.pem'}")
    result = run("--debug", "-i", str(inv), "provision", "--dry-run")
    assert result.exit_code != 0
    assert result.exception is not None
    assert not isinstance(result.exception, SystemExit)


# ---------------------------------------------------------------- secret files


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe\x00Zq9value", "is not UTF-8 text"),
        (b"Zq9\x00value\n", "contains a NUL byte"),
    ],
    ids=["not-utf8", "nul"],
)
def test_unusable_secret_file_is_one_line(tmp_path: Path, content: bytes, expected: str) -> None:
    secret = tmp_path / "pw"
    secret.write_bytes(content)
    secret.chmod(0o600)
    inv = write_inventory(tmp_path, password=f"{{file: {secret}}}")
    result = run("-i", str(inv), "inventory", "check")
    line = assert_one_line(result, 2, "clusters.c1.auth.password", str(secret), expected)
    assert "Zq9" not in result.output and "value" not in line


def test_secret_file_of_unknown_user_home_is_one_line(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path, password="{file: ~no-such-user-g20/pw}")
    result = run("-i", str(inv), "inventory", "check")
    assert_one_line(result, 2, "~no-such-user-g20/pw", "does not exist")


def test_secret_file_readable_by_others_warns_naming_it(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("hunter2\n")
    secret.chmod(0o644)
    inv = write_inventory(tmp_path, password=f"{{file: {secret}}}")
    result = run("-i", str(inv), "inventory", "check")
    assert result.exit_code == 0, result.output
    assert f"warning: secret file {secret} can be read" in result.stderr
    assert "hunter2" not in result.output
    secret.chmod(0o600)
    assert "warning" not in run("-i", str(inv), "inventory", "check").stderr


# ---------------------------------------------------------------- status fails with its rows


def test_status_exits_1_when_pve_is_unreachable(tmp_path: Path) -> None:
    inv = write_inventory(tmp_path)
    result = run("-i", str(inv), "status", "--json")
    assert_one_line(result, 1, "ct1", "could not be read")
    rows = json.loads(result.stdout)  # stdout stays one JSON document
    assert [row["state"] for row in rows] == ["error"]


# ---------------------------------------------------------------- anything else that escapes


def _broken_reader(kind: str) -> click.Command:
    @click.command(kind)
    @click.argument("path", type=click.Path(path_type=Path))
    def command(path: Path) -> None:
        if kind == "decode":
            path.read_text(encoding="utf-8")
        elif kind == "open":
            path.open().close()
        else:
            raise LookupError("a bug that is not a DflashopsError")

    return command


DECODE, OPEN, BUG = (_broken_reader(kind) for kind in ("decode", "open", "bug"))


@click.group(
    cls=LazyGroup,
    lazy={name: f"{__name__}:{var}" for name, var in [("decode", "DECODE"), ("open", "OPEN")]},
)
@click.option("--debug", is_flag=True)
@click.pass_context
def boundary_cli(ctx: click.Context, debug: bool) -> None:
    """The real LazyGroup with commands that fail with plain Python exceptions."""
    ctx.obj = AppContext(debug=debug)


boundary_cli.add_command(BUG, "bug")


def test_escaping_decode_error_is_bad_input_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9")
    result = CliRunner().invoke(boundary_cli, ["decode", str(path)])
    assert_one_line(result, 2, "not utf-8 text", "--debug")


def test_escaping_os_error_names_the_file_exit_1(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    result = CliRunner().invoke(boundary_cli, ["open", str(missing)])
    assert_one_line(result, 1, str(missing), "No such file")


def test_escaping_bug_is_one_line_and_debug_keeps_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(boundary_cli, ["bug", "x"])
    assert_one_line(result, 1, "LookupError: a bug that is not a DflashopsError")
    debug = CliRunner().invoke(boundary_cli, ["--debug", "bug", "x"])
    assert isinstance(debug.exception, LookupError)


def test_click_usage_errors_still_exit_2() -> None:
    result = CliRunner().invoke(boundary_cli, ["open"])
    assert result.exit_code == 2
    assert "Missing argument" in result.output


# ---------------------------------------------------------------- output hygiene


def test_json_output_never_has_bare_infinity() -> None:
    text = dump_json({"rate": math.inf, "rows": [{"mean": math.nan}, -math.inf], "ok": 1.5})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c}")) == {
        "rate": None,
        "rows": [{"mean": None}, None],
        "ok": 1.5,
    }


def test_long_error_text_is_cut_at_a_word_with_an_ellipsis() -> None:
    text = " ".join(["certificate"] * 40)
    cut = shorten(text, 200)
    assert len(cut) <= 200
    assert cut.endswith("certificate\u2026")
    assert shorten("short  text\nhere") == "short text here"


# ---------------------------------------------------------------- hostile text in errors


def test_control_characters_in_an_error_are_escaped() -> None:
    result = CliRunner().invoke(
        cli, ["playbook", "show", str(PLAYBOOK), "--set", "server.\x1b]0;pwn\x07=1"]
    )
    line = assert_one_line(result, 2, "--set:server.\\x1b]0;pwn\\x07: unknown key")
    assert "\x1b" not in line and "\x07" not in line


def test_a_hostile_key_is_named_cut_not_reprinted() -> None:
    result = CliRunner().invoke(
        cli, ["playbook", "show", str(PLAYBOOK), "--set", "k" * 10_000 + "=1"]
    )
    line = assert_one_line(result, 2, "--set:kkkk")
    assert len(line) < 300 and "…" in line
