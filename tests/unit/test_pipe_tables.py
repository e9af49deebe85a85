"""Tables in a pipe: the lab demo's end tables, from canned data, printed by the console the CLI
makes for a pipe. Prose cells wrap at spaces to the width (``COLUMNS``, else
``PIPE_TABLE_WIDTH``); identifiers, paths, URLs and numbers stay whole, and only a token wider
than the width widens the table."""

from __future__ import annotations

import io
import re
import sys

import pytest

from dflashops.cli.console import PIPE_TABLE_WIDTH, make_console
from dflashops.cli.lab_demo_view import acceptance_table, demo_renderables
from dflashops.lab.demo import DemoReport

STATE = "/root/.local/state/dflashops/lab"
RUN_DIR = f"{STATE}/up/lab-dflash@lab.lab-ct1"  # the pair's run folder
FINDINGS = (
    "drafter check found 3 error(s): error: transformer_layer_config.layer_types: expected "
    '["sliding_attention", "sliding_attention", "full_attention"], found ["full_attention", '
    '"full_attention", "full_attention"]; error: aux_hidden_state_layer_ids: expected '
    "[1, 2, 3], found [2, 3, 4]; error: mask_token_id: expected 151669, found 151643"
)
# one line of a table: box drawing, then cells
TABLE_LINE = re.compile(r"^\s*[┏┃┡│└┌├╭╰+|]")


def canned_report() -> DemoReport:
    report = DemoReport(
        inventory=f"{STATE}/inventory.yaml",
        up_state=f"{STATE}/up",
        endpoint="http://10.200.0.10:8000/v1",
        model="lab-target",
        refused_keys=["transformer_layer_config.layer_types", "mask_token_id"],
        pushed_keys=["transformer_layer_config.layer_types", "mask_token_id"],
        second_pair="drafter check found 1 error(s): the drafter folder is missing in lab-ct2",
        first_reply="The quick brown fox",
        playbook=f"{STATE}/up/lab-dflash@lab-ct1/lab-dflash.tuned.yaml",
        playbook_file=f"{STATE}/lab-dflash.incident.yaml",
        tune={"best_k": 3},
        run_folder=f"{STATE}/up/lab-dflash@lab-ct1",
        acceptance={
            "guessed": {
                "k": 4,
                "spec_decode_acceptance_length": 1.02,
                "per_position_acceptance": [0.02, 0.0, 0.0, 0.0],
                "output_throughput": 18.4,
            },
            "corrected": {
                "k": 4,
                "spec_decode_acceptance_length": 2.61,
                "per_position_acceptance": [0.81, 0.47, 0.22, 0.11],
                "output_throughput": 39.9,
            },
            "tuned": {"k": 3, "spec_decode_acceptance_length": 2.49, "output_throughput": 41.2},
        },
    )
    report.stage("setup", "", "lab runtime and models", "vLLM 0.9.2 (CPU); models cached", 0.4)
    report.stage("setup", "", "lab up", "PVE API https://127.0.0.1:8006/api2/json", 21.7)
    report.stage("0 provision", "lab-ct1", "provision", "created CT 101 on lab (10.200.0.10)", 9.1)
    report.stage("1 guessed config", "lab-ct1", "drafter", FINDINGS, 1.2)
    report.stage(
        "setup",
        "",
        "stage the incident",
        "tiny-qwen3-dflash-guessed copied to /srv/lab-demo/tiny-qwen3-dflash in lab-ct1",
        2.2,
    )
    report.stage("2 --force", "lab-ct1", "bench", "18.4 tok/s, acceptance length 1.02", 61.0)
    report.stage("3 --fix-drafter", "lab-ct1", "report", f"4 files in {RUN_DIR}", 3.5)
    return report


def pipe_console(monkeypatch: pytest.MonkeyPatch, columns: int | None) -> io.StringIO:
    """Point stdout at a pipe-like stream, as ``lab demo | cat`` does, with or without COLUMNS."""
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setenv("LANG", "C.UTF-8")
    for name in ("LC_ALL", "LC_CTYPE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    return stream


def table_lines(report: DemoReport) -> list[str]:
    console = make_console()
    for renderable in demo_renderables(report):
        console.print(renderable)
    file = console.file
    assert isinstance(file, io.StringIO)
    return [line for line in file.getvalue().splitlines() if TABLE_LINE.match(line)]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in re.split(r"[┃│]", line)[1:-1]]


def narrowest(report: DemoReport) -> int:
    """How wide the stage table must be to keep every word whole: each column's longest word,
    plus the borders and the cells' padding."""
    rows = [("run", "container", "step", "result", "seconds")]
    rows += [(r["run"], r["container"], r["step"], r["result"], "0.0") for r in report.stages]
    floors = [
        max(len(w) for cell in column for w in cell.split() or [""])
        for column in zip(*rows, strict=True)
    ]
    return sum(floors) + 3 * len(floors) + 1


@pytest.mark.parametrize("columns", [None, 100, 80])
def test_no_table_line_is_wider_than_the_width_unless_a_word_needs_it(
    monkeypatch: pytest.MonkeyPatch, columns: int | None
) -> None:
    report = canned_report()
    pipe_console(monkeypatch, columns)
    width = columns or PIPE_TABLE_WIDTH
    lines = table_lines(report)
    assert len(lines) > 15
    if columns is None:
        assert narrowest(report) < width  # the run folder fits: nothing may go past 120
    assert max(len(line) for line in lines) <= max(width, narrowest(report))
    # the result cell wrapped at spaces; every identifier, path, URL and number is whole
    text = "\n".join(lines)
    for token in (
        "transformer_layer_config.layer_types:",
        "https://127.0.0.1:8006/api2/json",
        RUN_DIR,
        "151669,",
        "(10.200.0.10)",
    ):
        assert token in text
    assert "…" not in text


def test_columns_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    pipe_console(monkeypatch, 112)
    narrow = table_lines(canned_report())
    assert max(len(line) for line in narrow) == 112  # the stage table fills it: its prose wraps
    pipe_console(monkeypatch, 1000)
    wide = table_lines(canned_report())
    assert max(len(line) for line in wide) > PIPE_TABLE_WIDTH  # COLUMNS wins over the pipe's
    assert len(wide) < len(narrow)


def test_a_token_wider_than_the_width_stays_whole_and_widens_only_its_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    report = canned_report()
    digest = "sha256:" + "0" * 64  # nowhere to break it
    report.stage("3 --fix-drafter", "lab-ct1", "drafter", f"pushed weights {digest}", 0.3)
    pipe_console(monkeypatch, 60)
    lines = table_lines(report)
    assert any(cells(line)[3:4] == [digest] for line in lines)  # whole, on its own cell line
    assert "…" not in "\n".join(lines)
    pipe_console(monkeypatch, 60)
    console = make_console()
    console.print(acceptance_table(report))  # no such token: it keeps to the width
    file = console.file
    assert isinstance(file, io.StringIO)
    assert all(len(line) <= 60 for line in file.getvalue().splitlines())
