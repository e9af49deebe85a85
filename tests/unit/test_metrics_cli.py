"""`dflashops parse-log`: tables and --json over the real log and the synthesized ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
REAL = LOGS / "real-vllm-0.32.0-cpu-ngram.log"


def test_json_is_one_document_with_windows_and_totals() -> None:
    result = CliRunner().invoke(cli, ["parse-log", str(REAL), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["file"] == str(REAL)
    assert doc["engine_version"] == "0.32.0"
    assert len(doc["throughput_windows"]) == 4
    first_spec = doc["spec_decode_windows"][0]
    assert first_spec["accepted_tokens"] == 188 and first_spec["num_drafts"] == 56
    assert first_spec["per_position_acceptance"] == [1.0, 0.821, 0.804, 0.732]
    totals = doc["spec_decode_totals"]
    assert (totals["accepted_tokens"], totals["drafted_tokens"], totals["num_drafts"]) == (
        592,
        600,
        164,
    )
    assert totals["num_drafts_exact"] is True
    assert doc["throughput_totals"]["peak_generation_throughput"] == 102.4


def test_tables() -> None:
    result = CliRunner().invoke(cli, ["parse-log", str(REAL)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    out = result.output
    assert "engine version 0.32.0" in out
    assert "Throughput windows" in out and "Spec-decode windows" in out
    assert "592/600" in out and "1.00 0.89 0.88 0.84" in out
    assert "≈" not in out  # every draft count is exact here


def test_inexact_drafts_are_marked_and_explained() -> None:
    path = LOGS / "synthesized-vllm-0.20.0.log"
    result = CliRunner().invoke(cli, ["parse-log", str(path)], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "≈" in result.output
    assert "MAL is printed with two decimals" in " ".join(result.output.split())


@pytest.mark.parametrize("name", sorted(p.name for p in LOGS.glob("*.log")))
def test_every_fixture_parses(name: str) -> None:
    result = CliRunner().invoke(cli, ["parse-log", str(LOGS / name), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["throughput_windows"] and doc["spec_decode_windows"]


def test_a_file_without_windows_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "quiet.log"
    path.write_text("INFO 12-02 10:00:00 [api_server.py:1] Starting vLLM API server\n")
    result = CliRunner().invoke(cli, ["parse-log", str(path)])
    assert result.exit_code == 2  # invalid input (issue 19), like an unreadable inventory
    assert result.stderr.startswith(f"error: {path}: no throughput or spec-decode lines")
    missing = CliRunner().invoke(cli, ["parse-log", str(tmp_path / "nope.log")])
    assert missing.exit_code == 2
