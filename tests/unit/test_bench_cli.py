"""`dflashops bench --url`: a real run against the local streaming server, saved and reloaded."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from dflashops.bench.models import BenchReport
from dflashops.cli import cli
from tests.unit.test_bench_client import FakeOpenAIServer


def test_bench_url_saves_a_report(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with FakeOpenAIServer(first_delay=0.01, chunk_delay=0.005) as srv:
        args = ["bench", "--url", f"{srv.url}/v1", "-w", "mixed", "-c", "1,2", "-n", "4"]
        result = CliRunner().invoke(
            cli, [*args, "--method", "dflash", "-k", "4", "--out", str(out)], env={"COLUMNS": "120"}
        )
    assert result.exit_code == 0, result.output
    assert f"saved {out}" in result.output
    assert "dflash k=4: client side" in result.output
    report = BenchReport.load(out)
    assert [lv.max_concurrency for lv in report.levels] == [1, 2]
    assert all(lv.completed == 4 for lv in report.levels)
    assert report.config.method == "dflash" and report.config.num_speculative_tokens == 4
    # recorded before the run: the server's own view never overrode them
    sources = report.config.resolved_from
    assert sources["method"] == sources["num_speculative_tokens"] == "command line"
    assert report.levels[0].spec_decode_acceptance_length == 3.0


def test_bench_json_with_some_failures(tmp_path: Path) -> None:
    jsonl = tmp_path / "half.jsonl"
    jsonl.write_text('{"prompt": "ok"}\n{"prompt": "FAIL"}\n')
    out = tmp_path / "run.json"
    with FakeOpenAIServer(first_delay=0.0, chunk_delay=0.0) as srv:
        args = ["bench", "--url", srv.url, "-w", str(jsonl), "-n", "2", "--json"]
        result = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output  # the warm-up (first prompt) worked
    doc = json.loads(result.stdout)
    (report,) = doc["reports"]
    assert report["path"] == str(out)
    level = report["levels"][0]
    assert (level["completed"], level["failed"]) == (1, 1)
    assert level["errors"] == ["HTTP 400: bad request: FAIL"]


def test_bench_level_with_only_failures_exits_1(tmp_path: Path) -> None:
    jsonl = tmp_path / "fail.jsonl"
    jsonl.write_text('{"prompt": "FAIL"}\n')
    with FakeOpenAIServer(first_delay=0.0, chunk_delay=0.0) as srv:
        args = ["bench", "--url", srv.url, "-w", str(jsonl), "--warmup", "0"]
        result = CliRunner().invoke(cli, [*args, "--out", str(tmp_path / "r.json")])
    assert result.exit_code == 1
    assert "every request failed at concurrency 1: HTTP 400" in result.stderr
    assert (tmp_path / "r.json").exists()  # the partial result is kept


def test_bench_usage_errors() -> None:
    runner = CliRunner()
    nothing = runner.invoke(cli, ["bench"])
    assert nothing.exit_code == 2 and "give a container NAME or --url URL" in nothing.stderr
    both = runner.invoke(cli, ["bench", "lab-ct1", "--url", "http://127.0.0.1:9"])
    assert both.exit_code == 2 and "not both" in both.stderr
    bad_levels = runner.invoke(cli, ["bench", "--url", "http://127.0.0.1:9", "-c", "1,x"])
    assert bad_levels.exit_code == 2
