"""`dflashops report`: one saved result, a comparison with deltas, --json, and real PNG plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from PIL import Image

from dflashops.bench.models import (
    BenchReport,
    LevelResult,
    RequestRecord,
)
from dflashops.bench.stats import aggregate_level, tpot_ms
from dflashops.cli import cli
from dflashops.metrics.spec_decode import SpecDecodeDelta
from dflashops.report.bench_view import comparison_rows, label_reports
from dflashops.report.plots import (
    ACCEPTANCE_PNG,
    CONCURRENCY_PNG,
    combined_acceptance_length,
    combined_per_position,
    write_plots,
)
from tests.support.reports import bench_report


def level(
    concurrency: int, tpot: float, per_pos: list[int] | None, drafts: int = 100
) -> LevelResult:
    records = [
        RequestRecord(
            prompt_id=f"p{i}",
            success=True,
            start_s=0.0,
            ttft_ms=50.0,
            e2el_ms=50.0 + tpot * 99,
            tpot_ms=tpot_ms(50.0, 50.0 + tpot * 99, 100),
            itl_ms=[tpot * 3] * 33,
            prompt_tokens=12,
            output_tokens=100,
            chunks=34,
        )
        for i in range(4)
    ]
    spec = None
    if per_pos is not None:
        spec = SpecDecodeDelta(
            num_drafts=drafts,
            num_draft_tokens=drafts * len(per_pos),
            num_accepted_tokens=sum(per_pos) * drafts // 100,
            accepted_per_position=[n * drafts // 100 for n in per_pos],  # same rates
        )
    duration = 4 * (50.0 + tpot * 99) / 1000.0 / concurrency
    return aggregate_level(records, max_concurrency=concurrency, duration=duration, spec=spec)


def report(method: str, k: int | None, tpot: float, per_pos: list[int] | None) -> BenchReport:
    return bench_report(
        [level(1, tpot, per_pos), level(4, tpot * 1.2, per_pos, drafts=200)],
        workload={"requests_per_level": 4},
        method=method,
        num_speculative_tokens=k,
        engine="vllm",
    )


@pytest.fixture
def saved(tmp_path: Path) -> list[Path]:
    runs = [
        ("baseline", report("none", None, 10.0, None)),
        ("dflash", report("dflash", 4, 4.0, [90, 70, 50, 30])),
        ("ngram", report("ngram", 4, 6.0, [80, 40, 20, 10])),
    ]
    return [r.save(tmp_path / f"{name}.json") for name, r in runs]


def test_single_report_table(saved: list[Path]) -> None:
    result = CliRunner().invoke(cli, ["report", str(saved[1])], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "dflash k=4: client side" in result.output
    assert "dflash k=4: speculative decoding" in result.output
    assert "0.90 0.70 0.50 0.30" in result.output
    assert "Comparison" not in result.output


def test_report_shows_what_bench_showed(tmp_path: Path) -> None:
    """One rendering path: a saved result read back shows its notes and warnings too."""
    saved = report("dflash", 4, 4.0, [90, 70, 50, 30]).model_copy(
        update={"notes": ["prefix cache not reset"], "warnings": ["max_tokens 2000 capped"]}
    )
    path = saved.save(tmp_path / "r.json")
    result = CliRunner().invoke(cli, ["report", str(path)])
    assert result.exit_code == 0, result.output
    assert "note: prefix cache not reset" in result.output
    assert "warning: max_tokens 2000 capped" in result.output


def test_comparison_deltas(saved: list[Path]) -> None:
    items = label_reports([(p, BenchReport.load(p)) for p in saved])
    rows = comparison_rows(items)
    assert [(r.max_concurrency, r.label) for r in rows] == [
        (1, "none"),
        (1, "dflash k=4"),
        (1, "ngram k=4"),
        (4, "none"),
        (4, "dflash k=4"),
        (4, "ngram k=4"),
    ]
    dflash_c1 = rows[1]
    assert dflash_c1.delta_pct["mean_tpot_ms"] == pytest.approx(-60.0)
    base_tps = rows[0].values["output_throughput"]
    assert base_tps is not None
    assert dflash_c1.delta_pct["output_throughput"] == pytest.approx(
        100 * ((dflash_c1.values["output_throughput"] or 0) / base_tps - 1)
    )
    assert rows[0].baseline and all(v in (None, 0.0) for v in rows[0].delta_pct.values())
    assert dflash_c1.delta_pct["spec_decode_acceptance_length"] is None  # no baseline value


def test_comparison_cli_and_json(saved: list[Path], tmp_path: Path) -> None:
    runner = CliRunner()
    text = runner.invoke(cli, ["report", *map(str, saved)], env={"COLUMNS": "150"})
    assert text.exit_code == 0, text.output
    assert "Comparison: change vs none" in text.output
    assert "-60%" in text.output  # dflash TPOT vs the baseline
    as_json = runner.invoke(cli, ["report", *map(str, saved), "--json", "--plots", str(tmp_path)])
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.stdout)
    assert [r["display_label"] for r in doc["reports"]] == ["none", "dflash k=4", "ngram k=4"]
    assert "requests" not in doc["reports"][0]["levels"][0]
    assert doc["reports"][1]["levels"][0]["spec_decode_acceptance_rate"] == pytest.approx(60.0)
    assert len(doc["comparison"]) == 6
    assert sorted(Path(p).name for p in doc["plots"]) == [ACCEPTANCE_PNG, CONCURRENCY_PNG]
    with_requests = runner.invoke(cli, ["report", str(saved[0]), "--json", "--requests"])
    assert len(json.loads(with_requests.stdout)["reports"][0]["levels"][0]["requests"]) == 4


def test_duplicate_labels_get_file_names(saved: list[Path], tmp_path: Path) -> None:
    copy = tmp_path / "dflash-again.json"
    copy.write_text(saved[1].read_text())
    items = label_reports([(p, BenchReport.load(p)) for p in (saved[1], copy)])
    assert [i.label for i in items] == ["dflash k=4 (dflash)", "dflash k=4 (dflash-again)"]


def test_plots_are_real_pngs(saved: list[Path], tmp_path: Path) -> None:
    items = label_reports([(p, BenchReport.load(p)) for p in saved])
    written = write_plots(items, tmp_path / "plots")
    assert [p.name for p in written] == [ACCEPTANCE_PNG, CONCURRENCY_PNG]
    for path in written:
        with Image.open(path) as image:
            assert image.format == "PNG"
            assert image.width >= 600 and image.height >= 400
            colours = image.convert("RGB").getcolors(maxcolors=1_000_000) or []
            assert len(colours) > 50  # something was drawn, not a blank canvas


def test_per_position_is_weighted_by_drafts(saved: list[Path]) -> None:
    dflash = BenchReport.load(saved[1])
    # both levels have the same rates; drafts 100 and 200
    assert combined_per_position(dflash) == pytest.approx([0.9, 0.7, 0.5, 0.3])
    assert combined_acceptance_length(dflash) == pytest.approx(1 + (240 + 480) / 300)
    assert combined_per_position(BenchReport.load(saved[0])) == []


def test_no_spec_runs_make_only_the_concurrency_plot(saved: list[Path], tmp_path: Path) -> None:
    items = label_reports([(saved[0], BenchReport.load(saved[0]))])
    assert [p.name for p in write_plots(items, tmp_path)] == [CONCURRENCY_PNG]


def test_bad_file_is_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    result = CliRunner().invoke(cli, ["report", str(bad)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: {bad}: not a dflashops benchmark report")
    assert result.stderr.count("\n") == 1


def test_tune_compare_and_roofline_sections_are_plotted(saved: list[Path], tmp_path: Path) -> None:
    from dflashops.bench.roofline import attach_roofline, plan_roofline
    from dflashops.report.tune_plots import (
        COMPARE_PNG,
        ROOFLINE_PNG,
        TUNE_PNG,
        measured_points,
        tune_series,
    )
    from dflashops.roofline.request import RooflineRequest

    base = BenchReport.load(saved[1])
    predictions = [
        {"k": k, "throughput_tok_s": tok, "ceiling_tok_s": 400.0 * (1 + 0.5 * k)}
        for k, tok in ((1, 100.0), (2, 120.0), (3, 115.0))
    ]
    tune = {
        "best_k": 2,
        "runs": [{"k": 3, "output_tok_s": 111.0}],
        "verify": {"k": 2, "output_tok_s": 118.0},
        "result": {"best_k": 2, "predictions": predictions},
    }
    rows = [
        {"method": "none", "k": None, "output_tok_s": 80.0, "acceptance_length": None},
        {"method": "dflash", "k": 4, "output_tok_s": 95.0, "acceptance_length": 1.9},
    ]
    report = base.model_copy(update={"tune": tune, "compare": {"rows": rows, "skipped": []}})
    report = attach_roofline(
        report, plan_roofline(RooflineRequest(gpu="A6000", weights="4GB"), None)
    )
    assert tune_series(tune) == (
        [(1, 100.0, 400.0 * 1.5), (2, 120.0, 800.0), (3, 115.0, 1000.0)],
        2,
    )
    assert measured_points(tune) == [(3, 111.0), (2, 118.0)]
    items = label_reports([(saved[1], report)])
    written = write_plots(items, tmp_path)
    assert [p.name for p in written] == [
        ACCEPTANCE_PNG,
        CONCURRENCY_PNG,
        TUNE_PNG,
        COMPARE_PNG,
        ROOFLINE_PNG,
    ]
    for path in written[2:]:
        with Image.open(path) as image:
            assert image.format == "PNG"
            assert len(image.convert("RGB").getcolors(maxcolors=1_000_000) or []) > 50
