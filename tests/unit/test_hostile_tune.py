"""Hostile ``tune-offline`` arguments: a huge k, non-finite or oversized numbers, in options and
in ``--from`` files, end in one error naming the option and exit 2, quickly.

Before: ``--step-cost 99999999999:0.02`` never returned (every per-k loop ran to that k), a
5,000-digit k raised Python's int digit-limit ValueError, and ``nan``/``inf`` passed every range
check (NaN fails no comparison) into NaN predictions.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli

BASE = ["tune-offline", "--acceptance", "0.8,0.5,0.3"]


def run(args: list[str]) -> tuple[int, str, float]:
    start = time.monotonic()
    result = CliRunner().invoke(cli, [*BASE, *args])
    return result.exit_code, result.output, time.monotonic() - start


def error_line(output: str) -> str:
    """The one ``Error:`` line Click prints for a bad option (after the usage lines)."""
    errors = [line for line in output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, output[-2000:]
    assert "Traceback" not in output
    assert len(errors[0]) < 300, errors[0]
    return errors[0]


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("args", "option", "reason"),
    [
        (["--step-cost", "99999999999:0.02,1:0.02"], "--step-cost", "K 1..64"),
        (["--step-cost", "65:0.02,1:0.02"], "--step-cost", "K 1..64"),
        (["--step-cost", "9" * 5000 + ":0.02,1:0.02"], "--step-cost", "K 1..64"),
        (["--throughput", "99999999999:40,1:20"], "--throughput", "K 1..64"),
        (["--step-cost", "2:1e999,1:0.02"], "--step-cost", "finite"),
        (["--throughput", "2:inf,1:20"], "--throughput", "finite"),
        (["--throughput", "2:nan,1:20"], "--throughput", "finite"),
        (["--step-cost", "2:0.03,1:0.02", "--tolerance", "nan"], "--tolerance", "finite"),
        (
            ["--step-cost", "2:0.03,1:0.02", "--drafted-per-draft", "inf"],
            "--drafted-per-draft",
            "finite",
        ),
        (
            ["--step-cost", "2:0.03,1:0.02", "--bandwidth-gbps", "nan", "--weights", "1GB"],
            "--bandwidth-gbps",
            "finite",
        ),
        (
            ["--step-cost", "2:0.03,1:0.02", "--bandwidth-gbps", "inf", "--weights", "1GB"],
            "--bandwidth-gbps",
            "finite",
        ),
    ],
)
def test_hostile_options_are_one_error_naming_the_option(
    args: list[str], option: str, reason: str
) -> None:
    code, out, elapsed = run(args)
    line = error_line(out)
    assert code == 2, out
    assert option in line and reason in line, line
    assert elapsed < 5, f"took {elapsed:.1f} s"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_acceptance_is_refused(value: str) -> None:
    result = CliRunner().invoke(
        cli, ["tune-offline", "--acceptance", f"0.8,{value}", "--step-cost", "1:0.02,2:0.03"]
    )
    assert result.exit_code == 2
    assert "--acceptance" in error_line(result.output)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    "run_fields",
    [
        {"k": 99999999999, "step_time_s": 0.02},
        {"k": 2, "step_time_s": 1e308 * 10},  # json.dumps writes Infinity
        {"k": 2, "output_tok_s": float("nan")},
    ],
)
def test_hostile_runs_in_a_from_file_are_refused(
    tmp_path: Path, run_fields: dict[str, object]
) -> None:
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [{"k": 1, "step_time_s": 0.02}, run_fields]}))
    start = time.monotonic()
    result = CliRunner().invoke(cli, [*BASE, "--from", str(path)])
    elapsed = time.monotonic() - start
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert str(path) in result.output or "runs" in result.output, result.output
    assert elapsed < 5


def test_k_at_the_limit_still_tunes() -> None:
    code, out, _ = run(["--step-cost", "1:0.02,64:0.2", "--k-max", "64", "--json"])
    assert code == 0, out
    result = json.loads(out)
    assert 1 <= result["best_k"] <= 64
    assert len(result["predictions"]) == 64
