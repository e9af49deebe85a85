"""``tune_load.png``: throughput against concurrency per k and for the schedule, from the
``tune["load"]`` section a ``tune --load`` run saves."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from dflashops.report.bench_view import LabelledReport
from dflashops.report.load_plots import LOAD_PNG, load_plot_data, write_load_plots
from dflashops.tune.load_schedule import decide
from dflashops.tune.load_section import load_section
from dflashops.tune.load_verdict import judge_schedule
from tests.support.reports import bench_report, level_result
from tests.unit.test_tune_load import CPU_CURVE, LEVELS, cpu_step
from tests.unit.test_tune_load_verdict import OLD_K, VLLM, plan, run_plan, verify_bench


def tuned_section(*, verified: bool = True) -> dict[str, Any]:
    """The section of the CPU machine tuned with the default budget, as JSON reads it back."""
    tuner = plan(4)
    _, runs = run_plan(tuner)
    result = tuner.recommend(runs)
    decision = decide(result, VLLM, 64)
    verify = verify_bench(decision, {}) if verified else []
    assert result.single_k is not None
    verdict = (
        judge_schedule(decision, runs, verify, old_k=OLD_K, fallback_k=result.single_k.k)
        if verified
        else None
    )
    section = load_section(result, decision, runs, verify_runs=verify, verdict=verdict)
    loaded: dict[str, Any] = json.loads(json.dumps(section))
    return loaded


def labelled(section: dict[str, Any] | None, label: str = "cpu-lab") -> LabelledReport:
    report = bench_report([level_result()], method="dflash", num_speculative_tokens=4)
    tune = None if section is None else {"mode": "load", "load": section}
    return LabelledReport(label=label, path=f"{label}.json", report=report.model_copy(
        update={"tune": tune}
    ))  # fmt: skip


def test_the_series_are_the_measured_runs_the_model_and_the_schedule() -> None:
    data = load_plot_data(tuned_section())
    assert data is not None
    assert data.levels == list(LEVELS)
    # one series per launched k, measured at every level
    assert sorted(data.measured) == [0, 1, 3, OLD_K]
    assert [c for c, _ in data.measured[0]] == list(LEVELS)
    assert [tok for _, tok in data.measured[0]] == pytest.approx(
        [c / cpu_step(c, 0) for c in LEVELS]
    )
    tokens = CPU_CURVE.tokens_per_step(1)
    assert [c for c, _ in data.predicted[1]] == list(LEVELS)
    assert [tok for _, tok in data.predicted[1]] == pytest.approx(
        [c * tokens / cpu_step(c, 1) for c in LEVELS]
    )
    # the schedule line is its verification bench
    assert data.schedule_measured
    assert [level for level, _ in data.schedule] == list(LEVELS)
    assert data.schedule[-1][1] == pytest.approx(32 / cpu_step(32, 0))
    assert data.ranges == [(1, 1, 4), (2, 2, 3), (3, 7, 2), (8, 19, 1), (20, 64, 0)]
    assert data.k_by_level == {1: 4, 2: 3, 4: 2, 8: 1, 16: 1, 32: 0}
    assert data.stops_paying_at == 32
    assert data.verdict is not None and data.verdict.startswith("schedule [[1, 1, 4]")


def test_before_verification_the_schedule_line_is_k_star_per_level() -> None:
    data = load_plot_data(tuned_section(verified=False))
    assert data is not None and not data.schedule_measured and data.verdict is None
    assert data.schedule[0][0] == 1
    assert data.schedule[0][1] == pytest.approx(CPU_CURVE.tokens_per_step(4) / cpu_step(1, 4))


def test_report_writes_the_png(tmp_path: Path) -> None:
    written = write_load_plots([labelled(None), labelled(tuned_section())], tmp_path / "plots")
    assert written == [tmp_path / "plots" / LOAD_PNG]
    assert written[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(written[0]) as image:
        assert image.format == "PNG"
        assert image.size[0] > image.size[1]  # two panels side by side
        assert len(image.convert("RGB").getcolors(maxcolors=1_000_000) or []) > 50


def test_no_load_section_no_plot(tmp_path: Path) -> None:
    assert write_load_plots([labelled(None)], tmp_path) == []
    assert load_plot_data({"levels": []}) is None
    assert not (tmp_path / LOAD_PNG).exists()


def test_an_older_section_with_fewer_keys_still_plots(tmp_path: Path) -> None:
    section = {
        "levels": [1, 4],
        "runs": [
            {"level": 1, "k": 0, "output_tok_s": 60.0},
            {"level": 4, "k": 0, "output_tok_s": 200.0},
            {"level": 1, "k": 4, "output_tok_s": 110.0},
            {"level": 4, "k": 4, "output_tok_s": 190.0},
        ],
        "k_by_level": {"1": 4, "4": 0},
    }
    data = load_plot_data(section)
    assert data is not None
    assert data.predicted == {} and data.schedule == [] and data.stops_paying_at is None
    assert write_load_plots([labelled(section)], tmp_path) == [tmp_path / LOAD_PNG]
