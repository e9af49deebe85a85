"""Hostile YAML in inventories, playbooks and ``--set`` values: alias bombs, deep nesting, huge
integers and non-finite numbers end in one line naming file:line(:key) and exit 2, quickly.

Before the limits in ``yamldoc``/``overrides`` a 1.6 KB alias bomb took seconds and GBs (an
inventory) or hung while building the error message (a ``--set`` value); deep nesting and a
5,000-digit integer escaped as RecursionError / ValueError tracebacks.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "playbooks" / "lab-dflash.yaml"
INVENTORY = REPO / "inventory" / "example.yaml"


def alias_bomb(levels: int = 9, width: int = 9, indent: str = "") -> str:
    """The classic "billion laughs": ``width ** levels`` strings from a few hundred bytes."""
    lines = [f'{indent}a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"{indent}a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def flow_bomb(levels: int = 9, width: int = 9) -> str:
    """The same bomb as one flow value, as a ``--set`` value would carry it."""
    value = '&a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
    for i in range(1, levels):
        value = f"&a{i} [" + ", ".join([value] + [f"*a{i - 1}"] * (width - 1)) + "]"
    return value


def run(args: list[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    result = CliRunner().invoke(cli, args)
    elapsed = time.monotonic() - start
    return result.exit_code, result.output, elapsed


def assert_one_line_error(code: int, output: str, elapsed: float, *needles: str) -> None:
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2, output[-2000:]
    assert len(lines) == 1, output[-2000:]
    assert "Traceback" not in output
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert elapsed < 5, f"took {elapsed:.1f} s"


@pytest.mark.timeout(30)
def test_inventory_alias_bomb_is_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY.read_text() + "x-bomb:\n" + alias_bomb(indent="  "))
    code, out, elapsed = run(["-i", str(path), "inventory", "show"])
    assert_one_line_error(code, out, elapsed, f"{path}:", "expands to more than")


@pytest.mark.timeout(30)
def test_playbook_alias_bomb_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(PLAYBOOK.read_text() + alias_bomb())
    code, out, elapsed = run(["playbook", "show", str(path)])
    assert_one_line_error(code, out, elapsed, f"{path}:", "expands to more than")


@pytest.mark.timeout(30)
def test_set_alias_bomb_is_refused_naming_the_key() -> None:
    code, out, elapsed = run(
        ["playbook", "show", str(PLAYBOOK), "--set", f"server.extra_args={flow_bomb()}"]
    )
    assert_one_line_error(code, out, elapsed, "--set:server.extra_args", "aliases")


@pytest.mark.timeout(30)
def test_inventory_set_alias_bomb_is_refused() -> None:
    code, out, elapsed = run(
        ["-i", str(INVENTORY), "inventory", "show", "--set", f"qwen36.tags={flow_bomb()}"]
    )
    assert_one_line_error(code, out, elapsed, "--set:qwen36.tags", "aliases")


def test_small_anchors_and_merge_keys_still_load(tmp_path: Path) -> None:
    """Ordinary reuse (``<<: *defaults``) stays legal: only the expansion size is capped."""
    path = tmp_path / "pb.yaml"
    path.write_text(PLAYBOOK.read_text() + alias_bomb(levels=3, width=3))
    code, out, _ = run(["playbook", "show", str(path)])
    assert "expands to more than" not in out
    assert code in (0, 2)  # the x- keys may be unknown to the model; the limit did not fire


@pytest.mark.timeout(30)
@pytest.mark.parametrize("depth", [65, 2000, 50_000])
def test_deep_nesting_is_one_line_not_recursion_error(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(PLAYBOOK.read_text() + "x-deep: " + "[" * depth + "]" * depth + "\n")
    code, out, elapsed = run(["playbook", "show", str(path)])
    assert_one_line_error(code, out, elapsed, f"{path}:", "nesting deeper than 64")


@pytest.mark.timeout(30)
def test_deep_set_value_is_one_line() -> None:
    value = "[" * 5000 + "]" * 5000
    code, out, elapsed = run(["playbook", "show", str(PLAYBOOK), "--set", f"server.x={value}"])
    assert_one_line_error(code, out, elapsed, "--set:server.x", "nests deeper")


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("9" * 5000, "more than 1000 digits"),
        (".inf", "must be finite"),
        ("-.Inf", "must be finite"),
        (".nan", "must be finite"),
        ("1.0e+999", "must be finite"),
    ],
)
def test_hostile_numbers_in_a_playbook_name_line_and_key(
    tmp_path: Path, text: str, reason: str
) -> None:
    original = PLAYBOOK.read_text()
    line = original.splitlines().index("server:") + 2
    path = tmp_path / "pb.yaml"
    path.write_text(original.replace("server:\n", f"server:\n  hostile: {text}\n", 1))
    code, out, elapsed = run(["playbook", "show", str(path)])
    assert_one_line_error(code, out, elapsed, f"{path}:{line}:server.hostile", reason)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("text", "reason"),
    [("9" * 5000, "more than 1000 digits"), (".inf", "finite"), ("1.0e+999", "finite")],
)
def test_hostile_numbers_in_set_values(text: str, reason: str) -> None:
    code, out, elapsed = run(
        ["playbook", "show", str(PLAYBOOK), "--set", f"server.num_speculative_tokens={text}"]
    )
    assert_one_line_error(code, out, elapsed, "--set:server.num_speculative_tokens", reason)


@pytest.mark.timeout(30)
def test_oversized_document_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "pb.yaml"
    path.write_text(PLAYBOOK.read_text() + "# " + "x" * (5 * 1024 * 1024) + "\n")
    code, out, elapsed = run(["playbook", "show", str(path)])
    assert_one_line_error(code, out, elapsed, f"{path}:", "more than 4194304")
