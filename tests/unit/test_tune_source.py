"""``--from``: runs from saved ``dflashops bench`` reports and from the hand-written layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.bench.models import LevelResult
from dflashops.cli import cli
from dflashops.tune import TuneInputError
from dflashops.tune.source import load_runs
from tests.support.reports import bench_report

REFERENCE = [0.80, 0.574, 0.40, 0.236, 0.1, 0.05, 0.02, 0.008, 0.003, 0.001, 0, 0, 0, 0, 0]


def level(k: int, *, concurrency: int = 1, tpot_ms: float | None = None) -> LevelResult:
    """A concurrency level as ``bench`` saves it, for a drafter following REFERENCE."""
    rates = REFERENCE[:k]
    drafts = 1000
    length = 1 + sum(rates)
    step_s = 0.018 + 0.002 * k
    return LevelResult(
        max_concurrency=concurrency,
        completed=8,
        failed=0,
        duration=10.0,
        total_input_tokens=800,
        total_output_tokens=2000,
        request_throughput=0.8,
        output_throughput=length / step_s * 0.95,  # TTFT drags the end-to-end rate down
        total_token_throughput=300.0,
        mean_tpot_ms=tpot_ms if tpot_ms is not None else step_s / length * 1000,
        spec_decode_acceptance_length=length,
        spec_decode_acceptance_rate=100 * sum(rates) / k,
        spec_decode_num_drafts=drafts,
        spec_decode_draft_tokens=drafts * k,
        spec_decode_accepted_tokens=round(drafts * sum(rates)),
        spec_decode_per_position_acceptance_rates=rates,
    )


def save_report(path: Path, k: int, *, method: str = "dflash", levels: list[LevelResult]) -> Path:
    report = bench_report(
        levels,
        workload={"num_prompts": 8, "requests_per_level": 8, "max_tokens": 256, "ignore_eos": True},
        container="lab-ct1",
        method=method,
        num_speculative_tokens=k,
        model="tiny-qwen3",
    )
    return report.save(path)


def test_bench_report_becomes_one_run(tmp_path: Path) -> None:
    path = save_report(tmp_path / "k4.json", 4, levels=[level(4), level(4, concurrency=4)])
    (run,) = load_runs(path)
    assert run.k == 4
    assert run.acceptance == pytest.approx(tuple(REFERENCE[:4]))
    assert run.acceptance_length == pytest.approx(1 + sum(REFERENCE[:4]))
    assert run.drafted_per_draft == 4.0 and run.num_drafts == 1000
    # decode rate from TPOT, not the end-to-end output throughput
    assert run.output_tok_s == pytest.approx((1 + sum(REFERENCE[:4])) / 0.026)
    assert run.label == "k4.json (dflash k=4)"


def test_three_bench_reports_tune_like_the_reference_curve(tmp_path: Path) -> None:
    paths = [save_report(tmp_path / f"k{k}.json", k, levels=[level(k)]) for k in (15, 1, 8)]
    args = ["tune-offline", "--json"]
    for path in paths:
        args += ["--from", str(path)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert 4 <= document["best_k"] <= 6
    assert document["step_cost"]["slope_s_per_token"] == pytest.approx(0.002)
    assert document["best_measured_k"] == 8


def test_bench_reports_that_cannot_tune_are_input_errors(tmp_path: Path) -> None:
    baseline = save_report(tmp_path / "none.json", 0, method="none", levels=[level(1)])
    with pytest.raises(TuneInputError, match="without speculative decoding"):
        load_runs(baseline)
    busy = save_report(tmp_path / "c4.json", 4, levels=[level(4, concurrency=4)])
    with pytest.raises(TuneInputError, match="no concurrency-1 level") as info:
        load_runs(busy)
    assert info.value.hint == "bench with --concurrency 1"
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"kind": "dflashops-bench", "schema_version": 99}))
    with pytest.raises(TuneInputError, match="newer") as info:
        load_runs(newer)
    assert info.value.field == "from"
    result = CliRunner().invoke(cli, ["tune-offline", "--from", str(busy)])
    assert result.exit_code == 2 and "concurrency-1" in result.stderr


def test_hand_written_runs_are_labelled(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text(
        json.dumps(
            {
                "note": "2x A6000",
                "runs": [
                    {"k": 2, "step_time_s": 0.02, "acceptance": [0.8, 0.5]},
                    {"k": 1, "step_time_s": 0.018, "label": "baseline-ish"},
                ],
            }
        )
    )
    assert [run.label for run in load_runs(path)] == ["runs.json#0", "baseline-ish"]
    path.write_text(json.dumps({"runs": []}))
    with pytest.raises(TuneInputError, match="runs"):
        load_runs(path)
