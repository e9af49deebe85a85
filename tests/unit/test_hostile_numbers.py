"""Huge and non-finite numbers where a number is expected (issue 20): in a log's stats lines
(skipped and counted, fast), in sizes and roofline options, and in every float option of the
CLI: one line naming the option, exit 2, or a correct result."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from dflashops.cli import cli
from dflashops.errors import TuneInputError
from dflashops.metrics.logs import parse_log
from dflashops.roofline.model import parse_count, parse_size

pytestmark = pytest.mark.timeout(60)

STATS = (
    "INFO 12-01 10:00:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: {prompt} "
    "tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
)
TUNE = ["tune-offline", "--acceptance", "0.8,0.6", "--step-cost", "1:0.02,2:0.025"]


def invoke(*args: str) -> tuple[Result, float]:
    start = time.monotonic()
    result = CliRunner().invoke(cli, list(args))
    return result, time.monotonic() - start


def error_line(result: Result) -> str:
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.split("\n") if line.startswith(("error:", "Error:"))]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---------------------------------------------------------------- parse-log


@pytest.mark.parametrize(
    "prompt",
    ["9" * 64_000 + ".0", "inf", "-inf", "1" * 31 + ".5"],
    ids=["64k", "inf", "-inf", "31"],
)
def test_a_stats_line_with_an_unreadable_number_is_skipped_and_counted(prompt: str) -> None:
    text = "\n".join(
        [
            STATS.format(s=0, prompt="10.0"),
            STATS.format(s=1, prompt=prompt),
            STATS.format(s=2, prompt="12.0"),
        ]
    )
    start = time.monotonic()
    summary = parse_log(text)
    assert time.monotonic() - start < 1.0  # a 64k-digit number took 24 s in the regexes
    assert [w.line for w in summary.throughput_windows] == [1, 3]
    assert summary.skipped_lines == [2]
    assert any("1 stats line(s) skipped" in note and "(lines 2)" in note for note in summary.notes)


def test_huge_digit_runs_anywhere_in_a_line_neither_crash_nor_stall() -> None:
    # in the process tag's pid (int() refuses 4,300 digits) and before "Engines Aggregated"
    lines = [
        "(EngineCore pid=" + "9" * 5000 + ") " + STATS.format(s=0, prompt="10.0"),
        "9" * 64_000 + " Engines Aggregated: Avg prompt throughput: 1.0 tokens/s",
        "Dec 02 10:00:11 host vllm[" + "9" * 5000 + "]: " + STATS.format(s=1, prompt="10.0"),
        "speculative_num_draft_tokens=" + "9" * 5000 + " server_args=",
    ]
    start = time.monotonic()
    summary = parse_log("\n".join(lines))
    assert time.monotonic() - start < 2.0
    assert summary.throughput_windows[0].pid is None  # not a pid any system has


def test_a_log_whose_every_stats_line_is_unreadable_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(STATS.format(s=0, prompt="inf") + "\n" + STATS.format(s=1, prompt="9" * 40))
    result, elapsed = invoke("parse-log", str(path))
    assert result.exit_code == 2
    line = error_line(result)
    assert f"{path}: every stats line holds a number that is not finite" in line
    assert "(lines 1, 2)" in line
    assert elapsed < 5


def test_parse_log_json_lists_skipped_lines(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(STATS.format(s=0, prompt="10.0") + "\n" + STATS.format(s=1, prompt="inf"))
    result, _ = invoke("parse-log", str(path), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["skipped_lines"] == [2]


# ---------------------------------------------------------------- sizes and the roofline


@pytest.mark.parametrize("text", ["1e999GB", "1e300GB", "1e999", "9" * 400 + "GB"])
def test_sizes_past_a_float_are_refused(text: str) -> None:
    with pytest.raises(TuneInputError, match=r"finite size|is not a size"):
        parse_size(text, field="weights")


def test_a_long_number_text_is_refused_fast_and_shown_cut() -> None:
    start = time.monotonic()
    with pytest.raises(TuneInputError) as caught:
        parse_size("1" * 100_000 + "x", field="weights")  # backtracked quadratically before
    assert time.monotonic() - start < 0.5
    assert len(caught.value.one_line()) < 200


def test_counts_past_a_float_are_refused() -> None:
    with pytest.raises(TuneInputError, match="finite count"):
        parse_count("1e999B", field="active-params")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["--gpu", "H200", "--weights", "1e999GB"], "--weights"),
        (["--gpu", "H200", "--weights", "54GB", "--extra-bytes", "1e999"], "--extra-bytes"),
        (["--gpu", "H200", "--weights", "1" * 100_000 + "GB"], "--weights"),  # ENAMETOOLONG once
        (["--gpu", "H200", "--weights", "54GB", "--active-params", "1e999"], "--active-params"),
        (["--bandwidth-gbps", "1e-300", "--weights", "54GB"], "--bandwidth-gbps"),
        (["--bandwidth-gbps", "nan", "--weights", "54GB"], "--bandwidth-gbps"),
        (["--bandwidth-gbps", "inf", "--weights", "54GB"], "--bandwidth-gbps"),
        (["--gpu", "H200", "--weights", "54GB", "--tp", "99999999999999"], "--tp"),
    ],
    ids=["weights", "extra", "long-weights", "active", "tiny-bw", "nan-bw", "inf-bw", "tp"],
)
def test_roofline_options_refuse_what_no_arithmetic_survives(args: list[str], option: str) -> None:
    result, elapsed = invoke(*TUNE, *args)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert option in line
    assert len(line) < 400
    assert elapsed < 5


def test_a_roofline_that_gives_no_step_time_is_refused_not_divided_by() -> None:
    # within every option's range, but 1e30 bytes over 0.001 GB/s is still a finite floor
    result, _ = invoke(*TUNE, "--bandwidth-gbps", "0.001", "--weights", "1e30", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["best_k"] >= 1


# ---------------------------------------------------------------- float options elsewhere


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["launch", "ct1", "--timeout", "inf"], "--timeout"),
        (["launch", "ct1", "--timeout", "nan"], "--timeout"),
        (["launch", "ct1", "--timeout", "-1"], "--timeout"),
        (["launch", "ct1", "--timeout", "1e999"], "--timeout"),
        (["restart", "ct1", "--timeout", "nan"], "--timeout"),
        (["bench", "--url", "http://127.0.0.1:9/v1", "--temperature", "inf"], "--temperature"),
        (["bench", "--url", "http://127.0.0.1:9/v1", "--temperature", "nan"], "--temperature"),
        (["tune-offline", "--acceptance", "0.8", "--tolerance", "nan"], "--tolerance"),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, list) else value,
)
def test_float_options_refuse_non_finite_values(args: list[str], option: str) -> None:
    result, _ = invoke(*args)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert f"'{option}'" in line
    if "-1" not in args:
        assert "is not a finite number" in line


def test_click_usage_errors_are_cut_and_escaped() -> None:
    result, _ = invoke(*TUNE, "--k-min", "9" * 5000)
    assert result.exit_code == 2
    assert len(error_line(result)) < 320
    result, _ = invoke("launch", "ct1", "--timeout", "\x1b[31mred")
    line = error_line(result)
    assert "\x1b" not in line and "\\x1b" in line
