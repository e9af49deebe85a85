"""parse-log on real public vLLM and SGLang log excerpts, against values computed by hand.

Every excerpt in ``tests/fixtures/logs/public/`` was published by someone else (issues, pull
requests, an engine's own test fixture); ``expected.json`` gives its source and the numbers a
reader works out from the printed lines. Each listed field of each listed window must match, and
the windows listed must be all the windows there are.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.metrics.log_models import LogSummary
from dflashops.metrics.logs import parse_log_file

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
PUBLIC = LOGS / "public"
EXPECTED: dict[str, dict[str, Any]] = {
    name: entry
    for name, entry in json.loads((PUBLIC / "expected.json").read_text(encoding="utf-8")).items()
    if not name.startswith("_")
}


def matches(actual: object, expected: object, field: str) -> bool:
    if isinstance(expected, float) and actual is not None:
        tolerance = 0.01 if field.endswith("_pct") else 1e-3
        return math.isclose(float(actual), expected, abs_tol=tolerance)  # type: ignore[arg-type]
    if isinstance(expected, list) and expected and isinstance(expected[0], float):
        return isinstance(actual, list) and actual == pytest.approx(expected, abs=1e-9)
    return actual == expected


def check_fields(found: object, expected: dict[str, Any], where: str) -> None:
    for field, value in expected.items():
        actual = getattr(found, field)
        assert matches(actual, value, field), f"{where}: {field} = {actual!r}, by hand {value!r}"


def test_the_corpus_is_complete_and_sourced() -> None:
    files = {path.name for path in PUBLIC.glob("*.log")}
    assert files == set(EXPECTED), "every excerpt has an entry in expected.json, and back"
    assert len(files) >= 20
    for name, entry in EXPECTED.items():
        assert entry["source"].startswith("https://github.com/"), name
        for key in ("where", "engine", "method", "hand"):
            assert entry[key], f"{name}: {key}"
    engines = " ".join(entry["engine"] for entry in EXPECTED.values())
    assert "vLLM V0" in engines and "vLLM V1" in engines and "SGLang 0.4" in engines
    methods = " ".join(entry["method"] for entry in EXPECTED.values())
    for method in ("DFlash", "EAGLE", "MTP", "n-gram", "Medusa", "draft model"):
        assert method in methods, method


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_public_excerpt(name: str) -> None:
    entry = EXPECTED[name]
    summary = parse_log_file(PUBLIC / name)
    for kind in ("throughput_windows", "spec_decode_windows"):
        windows = getattr(summary, kind)
        assert [w.line for w in windows] == [w["line"] for w in entry[kind]], f"{name}: {kind}"
        for window, wanted in zip(windows, entry[kind], strict=True):
            check_fields(window, wanted, f"{name}:{window.line}")
    if "spec_decode_totals" in entry:
        assert summary.spec_decode_totals is not None
        check_fields(summary.spec_decode_totals, entry["spec_decode_totals"], f"{name}: totals")
    if "throughput_totals" in entry:
        check_fields(summary.throughput_totals, entry["throughput_totals"], f"{name}: totals")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_log_command_reads_every_excerpt(name: str) -> None:
    result = CliRunner().invoke(cli, ["parse-log", str(PUBLIC / name), "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert len(document["spec_decode_windows"]) == len(EXPECTED[name]["spec_decode_windows"])
    table = CliRunner().invoke(cli, ["parse-log", str(PUBLIC / name)], env={"COLUMNS": "160"})
    assert table.exit_code == 0, table.output


def load(name: str) -> LogSummary:
    return parse_log_file(PUBLIC / name)


def test_v0_acceptance_length_is_emitted_per_step_not_one_plus_accepted() -> None:
    # issue 19's example: 1 + 8547/4437 = 2.93 was reported; the tokens per step are 2.39
    (window,) = load("vllm-0.6.3-v0-draft-k3.log").spec_decode_windows
    assert window.mean_acceptance_length == pytest.approx(10616 / 4437)
    assert window.system_efficiency is not None and window.num_spec_tokens is not None
    assert window.mean_acceptance_length == pytest.approx(
        window.system_efficiency * (window.num_spec_tokens + 1), abs=0.005
    )
    # one accepted token after a rejection: 1.0 tokens per step, not 2.0
    first, _ = load("vllm-0.7-v0-draft-k5-cumulative.log").spec_decode_windows
    assert first.mean_acceptance_length == 1.0 and first.acceptance_rate_pct == pytest.approx(20)


def test_sglang_rate_is_given_as_printed_and_in_the_consistent_definition() -> None:
    summary = load("sglang-0.5.3-eagle3-accept-rate-with-bonus.log")
    first = summary.spec_decode_windows[0]
    assert (first.acceptance_rate_pct, first.acceptance_rate_formula) == (54.0, "sglang-with-bonus")
    assert first.draft_acceptance_rate_pct == pytest.approx(100 * 1.17 / 3)
    assert any("4 draft tokens per step" in note for note in summary.notes)
    assert any("PR #23530" in note for note in summary.notes)


def test_wrapped_lines_read_like_the_published_ones() -> None:
    """The reconstructed fixture wraps the DP3 excerpt's real lines in journald, ANSI, Python
    logging, docker and progress-bar prefixes with CRLF endings: the same windows come out."""
    wrapped = parse_log_file(LOGS / "reconstructed-wrappers-vllm-dp3.log")
    published = load("vllm-0.10.1-v1-dp3-k5.log")
    fields = ("engine", "generation_throughput", "prompt_throughput", "kv_cache_usage_pct")
    assert [tuple(getattr(w, f) for f in fields) for w in wrapped.throughput_windows] == [
        tuple(getattr(w, f) for f in fields) for w in published.throughput_windows
    ]
    counted = (
        "engine",
        "accepted_tokens",
        "drafted_tokens",
        "num_drafts",
        "mean_acceptance_length",
    )
    assert [tuple(getattr(w, f) for f in counted) for w in wrapped.spec_decode_windows[:2]] == [
        tuple(getattr(w, f) for f in counted) for w in published.spec_decode_windows
    ]
    first = wrapped.throughput_windows[0]
    assert (first.timestamp, first.pid, first.process) == ("09-01 14:28:09", 3617069, "APIServer")
    assert wrapped.spec_decode_windows[1].process == "EngineCore_DP1"
    cut = wrapped.spec_decode_windows[2]
    assert cut.truncated and cut.engine == "002" and cut.acceptance_rate_pct == 62.4
    assert cut.mean_acceptance_length is None and cut.accepted_tokens is None
    assert published.spec_decode_totals is not None
    assert wrapped.spec_decode_totals == published.spec_decode_totals.model_copy(
        update={"windows": 3}  # the cut line is a window without counts
    )
