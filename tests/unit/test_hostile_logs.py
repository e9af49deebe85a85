"""Hostile logs for ``parse-log``: lines of thousands of spaces after each message marker finish
fast, and a file is read line by line with every line cut at ``MAX_LINE_BYTES`` (a 50 MB log
without a newline once held the whole file, several times over, in memory)."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.metrics.logs import MAX_LINE_BYTES, parse_log_file

WINDOW = (
    "INFO 12-01 10:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
    "Avg generation throughput: 20.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%\n"
)
MARKERS = [
    "INFO ",
    "Avg prompt throughput: ",
    "SpecDecoding metrics: ",
    "Decode batch, #running-req: ",
    "Mean acceptance length: ",
    "Draft acceptance rate: ",
    "[2025-12-01 10:00:00",
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("marker", MARKERS)
def test_lines_of_spaces_after_a_marker_are_fast(tmp_path: Path, marker: str) -> None:
    path = tmp_path / "server.log"
    path.write_text(WINDOW + (marker + " " * 20_000 + "x\n") * 5)
    start = time.monotonic()
    result = CliRunner().invoke(cli, ["parse-log", str(path), "--json"])
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert elapsed < 5, f"{marker!r}: {elapsed:.1f} s"


@pytest.mark.timeout(60)
def test_a_huge_line_is_cut_and_memory_stays_bounded(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    with path.open("wb") as handle:
        handle.write(WINDOW.encode())
        handle.write(b"x" * (20 * 1024 * 1024) + b"\n")
        handle.write(WINDOW.replace("10:00:00", "10:00:10").encode())
    tracemalloc.start()
    try:
        summary = parse_log_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * MAX_LINE_BYTES + 4 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    # both real windows survive, and line numbers still count the huge line once
    assert len(summary.throughput_windows) == 2
    assert [w.line for w in summary.throughput_windows] == [1, 3]
