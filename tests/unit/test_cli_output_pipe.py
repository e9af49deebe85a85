"""Human output through a pipe (Click's runner is no TTY): whole words, no ellipsis, ASCII.

The rule the CLI keeps (``dflashops.cli.console``): without COLUMNS text does not wrap and
tables are laid out to ``PIPE_TABLE_WIDTH``; with a narrow COLUMNS text and table cells wrap at
spaces only, and a line grows past COLUMNS rather than
break a word (an identifier, a key, a URL, a number) or cut a cell. So the narrow output holds
exactly the words of the unwrapped one: a folded word would show up as two new words.
"""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.table import Table

from dflashops.cli import cli
from dflashops.cli.console import (
    PIPE_TABLE_WIDTH,
    UNWRAPPED_WIDTH,
    FittingConsole,
    ascii_only,
    make_console,
    output_width,
    table_width,
    to_ascii,
)
from tests.fixtures.drafter import CORRECTED, GUESSED, REF_36, TARGET
from tests.unit.test_report_bench import report as bench_report

NARROW = 60
LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
INVENTORY = Path(__file__).resolve().parents[2] / "inventory" / "example.yaml"
TUNE = [
    "tune-offline",
    "--acceptance",
    "0.80,0.574,0.40,0.236,0.1,0.05,0.02",
    "--gpu",
    "RTX A6000",
    "--tp",
    "2",
    "--weights",
    "54GB",
    "--throughput",
    "1:60,4:100",
]
# words are what whitespace, box drawing and table rules separate; rules alone are no words
SEPARATORS = re.compile(r"[\s\u2500-\u257f|+]+")
RULE = re.compile(r"[-=]{2,}")
BORDERS = "┏┃┡│└"  # the first character of each line of a table with rich's default box
CHECK = ["drafter", "check", str(GUESSED), "--ref", REF_36, "--target", str(TARGET)]
COMMANDS = [
    pytest.param(["drafter", "diff", str(GUESSED), "--against", str(CORRECTED)], 0, id="diff"),
    pytest.param(["drafter", "diff", str(GUESSED), "--against", REF_36], 0, id="diff-registry"),
    pytest.param(CHECK, 4, id="drafter-check"),
    pytest.param(["drafter", "refs"], 0, id="drafter-refs"),
    pytest.param(["parse-log", str(LOGS / "real-vllm-0.32.0-cpu-ngram.log")], 0, id="log-real"),
    pytest.param(["parse-log", str(LOGS / "synthesized-vllm-0.34.0-dp2.log")], 0, id="log-dp2"),
    pytest.param(["parse-log", str(LOGS / "synthesized-vllm-0.20.0.log")], 0, id="log-inexact"),
    pytest.param(["report", "DFLASH"], 0, id="report"),
    pytest.param(["report", "BASELINE", "DFLASH"], 0, id="report-comparison"),
    pytest.param(TUNE, 0, id="tune-offline"),
    pytest.param(["-i", str(INVENTORY), "inventory", "show"], 0, id="inventory-show"),
]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Two bench results, by the placeholder COMMANDS name them with."""
    folder = tmp_path_factory.mktemp("reports")
    runs = {
        "BASELINE": bench_report("none", None, 10.0, None),
        "DFLASH": bench_report("dflash", 4, 4.0, [90, 70, 50, 30]),
    }
    return {name: str(r.save(folder / f"{name}.json")) for name, r in runs.items()}


def run(
    args: list[str],
    code: int,
    *,
    columns: int | None = None,
    lang: str = "C.UTF-8",
    charset: str = "utf-8",
) -> str:
    env = {
        "COLUMNS": None if columns is None else str(columns),
        "LANG": lang,
        "LC_ALL": None,
        "LC_CTYPE": None,
    }
    result = CliRunner(charset=charset).invoke(cli, args, env=env)
    assert result.exit_code == code, result.output
    return result.stdout


def words(text: str) -> set[str]:
    return {w for w in SEPARATORS.split(text) if w and not RULE.fullmatch(w)}


@pytest.mark.parametrize(("args", "code"), COMMANDS)
def test_narrow_output_keeps_every_word_of_the_unwrapped_one(
    args: list[str], code: int, saved: dict[str, str]
) -> None:
    args = [saved.get(arg, arg) for arg in args]
    unwrapped = run(args, code)
    narrow = run(args, code, columns=NARROW)
    assert words(narrow) == words(unwrapped)
    if args != CHECK:  # its findings quote an engine's "(2, 17, …)"
        assert "…" not in unwrapped + narrow


def test_narrow_text_wraps_at_spaces_to_columns() -> None:
    head = run(CHECK, 4, columns=NARROW).split("┏")[0].splitlines()
    assert "sha256:" in head[-1] and len(head[-1].split()) == 1  # a word wider than COLUMNS
    # only a word wider than COLUMNS (the digest, a long path) makes a line wider
    assert all(len(line) <= NARROW or len(line.split()) == 1 for line in head)
    tune = run(TUNE, 0, columns=NARROW)
    prose = tune[tune.index("roofline:") :].splitlines()
    assert len(prose) > 10 and all(len(line) <= NARROW for line in prose)


@pytest.mark.parametrize(("args", "code"), COMMANDS)
def test_non_utf8_locale_gives_the_same_words_in_ascii(
    args: list[str], code: int, saved: dict[str, str]
) -> None:
    args = [saved.get(arg, arg) for arg in args]
    unicode = run(args, code)
    expected = words(to_ascii(" ".join(sorted(words(unicode)))))
    for output in (run(args, code, lang="C"), run(args, code, charset="ascii")):
        assert output.isascii()
        assert words(output) == expected


def test_unwrapped_rows_stay_on_one_line() -> None:
    # a wide COLUMNS: tables are not laid out to the pipe's table width either
    diff = run(
        ["drafter", "diff", str(GUESSED), "--against", str(CORRECTED)], 0, columns=UNWRAPPED_WIDTH
    )
    row = next(line for line in diff.splitlines() if "dflash_config.target_layer_ids" in line)
    assert "[2, 17, 32, 47, 62]" in row and "[1, 16, 31, 46, 61]" in row
    layer_types = next(line for line in diff.splitlines() if "layer_types" in line)
    assert '["full_attention", "full_attention", "full_attention", "full_' in layer_types
    assert '"sliding_attention", "full_attention"]' in layer_types
    log = run(["parse-log", str(LOGS / "synthesized-vllm-0.34.0-dp2.log")], 0)
    assert any(line.rstrip().endswith("0.90 0.72 0.54 0.36") for line in log.splitlines())
    tune = run(TUNE, 0).splitlines()  # text does not wrap in a pipe without COLUMNS
    fit = "Step-time fit: t = 29.967 ms + 0.033 ms × drafted tokens (rmse 0.000 ms)"
    assert any(line.strip() == fit for line in tune)
    merged = "r_i does not depend on k; runs at different k are merged position by position"
    assert f"  - {merged}" in tune


def test_tables_in_a_pipe_fit_the_table_width_text_does_not_wrap() -> None:
    diff = run(["drafter", "diff", str(GUESSED), "--against", str(CORRECTED)], 0)
    assert max(len(line) for line in diff.splitlines()) == PIPE_TABLE_WIDTH  # layer_types wraps
    wide = run(["drafter", "diff", str(GUESSED), "--against", str(CORRECTED)], 0, columns=1000)
    assert words(diff) == words(wide)
    tune = run(TUNE, 0)
    tables = [line for line in tune.splitlines() if line[:1] in BORDERS]
    assert tables and all(len(line) <= PIPE_TABLE_WIDTH for line in tables)
    assert max(len(line) for line in tune.splitlines()) > PIPE_TABLE_WIDTH  # its prose


def test_bench_columns_are_never_cut(saved: dict[str, str]) -> None:
    for columns in (None, 80, NARROW):
        text = run(["report", saved["DFLASH"]], 0, columns=columns)
        client = text.split("client side")[1]
        assert "12.00/12.00" in client and "14.40/14.40" in client  # ITL mean/p99 per level
        assert "446/446" in client and "525/525" in client  # E2EL, the last column
        assert "…" not in text


def test_ascii_fallbacks_read_as_ascii() -> None:
    log = run(["parse-log", str(LOGS / "synthesized-vllm-0.20.0.log")], 0, lang="C")
    assert "~ drafts = accepted / (MAL - 1)" in log and "?" not in log
    tune = run(TUNE, 0, lang="POSIX")
    assert "768 GB/s * tp 2" in tune and "1 + sum_{i<k} r_i" in tune and "?" not in tune
    assert "+----" in tune  # rich's box.ASCII


@pytest.mark.parametrize(
    ("encoding", "environ", "c_locale_at_start", "expected"),
    [
        ("utf-8", {"LANG": "C.UTF-8"}, False, False),
        ("utf-8", {"LANG": "en_US.utf8"}, False, False),
        ("utf-8", {"LANG": "C"}, False, True),
        ("utf-8", {"LANG": "en_US.ISO-8859-1"}, False, True),
        ("utf-8", {"LANG": "en_US"}, False, True),  # no codeset: the language's legacy one
        ("utf-8", {"LC_ALL": "POSIX", "LANG": "en_US.UTF-8"}, False, True),
        ("utf-8", {"LC_ALL": "de_DE.UTF-8@euro", "LANG": "C"}, False, False),
        ("utf-8", {"LC_CTYPE": "C.UTF-8", "LANG": "C"}, False, False),  # the user's own
        ("utf-8", {"LC_CTYPE": "C.UTF-8", "LANG": "C"}, True, True),  # Python's coercion
        ("utf-8", {"LC_CTYPE": "C.UTF-8", "LANG": "de_DE.UTF-8"}, True, False),
        ("utf-8", {}, False, False),  # nothing set is no choice: the stream decides
        ("ascii", {"LANG": "C.UTF-8"}, False, True),  # PYTHONIOENCODING=ascii
        ("ANSI_X3.4-1968", {}, True, True),
        ("UTF8", {"LANG": "C.UTF-8"}, False, False),
    ],
)
def test_ascii_only(
    encoding: str, environ: dict[str, str], c_locale_at_start: bool, expected: bool
) -> None:
    assert ascii_only(encoding, environ, c_locale_at_start=c_locale_at_start) is expected


def test_width_is_the_terminal_s_on_a_tty_else_columns_else_unwrapped() -> None:
    assert output_width(True, {"COLUMNS": "60"}) is None  # rich asks the terminal
    assert output_width(False, {"COLUMNS": "60"}) == 60
    assert output_width(False, {}) == UNWRAPPED_WIDTH
    assert output_width(False, {"COLUMNS": "wide"}) == UNWRAPPED_WIDTH
    # tables: the console's width, except in a pipe without COLUMNS
    assert table_width(True, {}) is None
    assert table_width(False, {"COLUMNS": "60"}) is None
    assert table_width(False, {}) == PIPE_TABLE_WIDTH


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_factory_on_a_terminal_and_on_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LC_ALL", "LC_CTYPE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("COLUMNS", "77")
    monkeypatch.setattr(sys, "stdout", _Terminal())
    tty = make_console()
    assert tty.is_terminal and tty.width == 77 and not tty.options.ascii_only
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.delenv("COLUMNS")
    assert make_console().width == UNWRAPPED_WIDTH
    assert make_console().table_width == PIPE_TABLE_WIDTH
    monkeypatch.setenv("LANG", "C")
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    err = make_console(stderr=True)
    assert err.options.ascii_only
    err.print("≈ 3 × 4 — ok ✓")
    assert stream.getvalue() == "~ 3 * 4 - ok ?\n"


def render(console: FittingConsole) -> str:
    file = console.file
    assert isinstance(file, io.StringIO)
    return file.getvalue()


def test_a_table_gives_way_in_its_prose_not_in_its_identifiers() -> None:
    console = FittingConsole(file=io.StringIO(), width=50)
    table = Table("key", "why")
    table.add_row("dflash_config.target_layer_ids", "the drafter was trained on these layers")
    table.add_row("sliding_window", "https://example.invalid/a/rather/long/url")
    console.print(table)
    text = render(console)
    assert "dflash_config.target_layer_ids" in text
    assert "https://example.invalid/a/rather/long/url" in text
    assert "…" not in text
    # the URL cannot share 50 columns with the key: the table grows to keep both whole
    widths = {len(line) for line in text.splitlines()}
    assert widths == {len("│ ") + 30 + len(" │ ") + 41 + len(" │")}


def test_a_table_within_the_width_wraps_its_prose_at_spaces() -> None:
    console = FittingConsole(file=io.StringIO(), width=60)
    table = Table("key", "status", "why", title="a title that fits in sixty columns")
    table.add_row("dflash_config.mask_token_id", "changed", "an id the drafter never saw " * 3)
    console.print(table)
    text = render(console)
    lines = text.splitlines()
    assert lines[0].strip() == "a title that fits in sixty columns"
    assert all(len(line) <= 60 for line in lines)
    assert "dflash_config.mask_token_id" in text and "…" not in text


def test_a_title_stays_on_one_line_when_the_width_allows() -> None:
    console = FittingConsole(file=io.StringIO(), width=UNWRAPPED_WIDTH)
    table = Table("k", title="Step-time fit: t = 18.000 ms + 2.000 ms × drafted tokens")
    table.add_row("1")
    console.print(table)
    assert render(console).splitlines()[0].strip().endswith("× drafted tokens")


def test_long_words_in_text_widen_only_their_own_print() -> None:
    console = FittingConsole(file=io.StringIO(), width=20)
    digest = "sha256:" + "0" * 64
    console.print(f"weights {digest}")
    console.print("a short line of prose that wraps")
    lines = render(console).splitlines()
    assert [line.rstrip() for line in lines[:2]] == ["weights", digest]
    assert all(len(line) <= 20 for line in lines[2:])
