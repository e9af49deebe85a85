"""``OfflineTuneRequest`` (which options go together), ``recommend_offline``, and a bench report
turned into a ``TuneRun`` in memory, as live tune does with each probe."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dflashops.bench.models import BenchReport
from dflashops.errors import TuneInputError
from dflashops.pydantic_errors import first_error_line
from dflashops.roofline.request import RooflineRequest
from dflashops.tune.offline import recommend_offline
from dflashops.tune.request import OfflineTuneRequest
from dflashops.tune.runs import TuneRun
from dflashops.tune.source import load_runs, run_from_report
from tests.support import reports

REFERENCE = (0.80, 0.574, 0.40, 0.236, 0.1, 0.05, 0.02)
COSTS = tuple(
    TuneRun(k=k, step_time_s=s)
    for k, s in ((1, 0.020), (2, 0.022), (4, 0.026), (8, 0.034), (15, 0.048))
)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "give --acceptance R0,R1,… or --from FILE"),
        ({"conditional": True}, "--conditional describes --acceptance; give --acceptance too"),
        ({"drafted_per_draft": 2.0, "sources": ["r.json"]}, "--drafted-per-draft describes"),
        ({"draft_fraction": [1.0]}, "--draft-fraction describes --acceptance"),
        ({"acceptance": [0.5], "roofline": {"tp": 2}}, "--tp is for the roofline: give --gpu"),
        ({"acceptance": [0.5], "roofline": {"gpu": "H200"}}, "the roofline needs --weights"),
        ({"acceptance": []}, "acceptance"),
        ({"acceptance": [0.5], "settings": {"k_min": 5, "k_max": 3}}, "above k_max"),
        ({"acceptance": [0.5], "acceptence": [0.5]}, "unknown key"),
    ],
)
def test_offline_option_combinations_are_checked(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as caught:
        OfflineTuneRequest.model_validate(fields)
    assert message in first_error_line(caught.value, fields)


def test_the_reference_curve_recommends_a_small_k() -> None:
    result = recommend_offline(OfflineTuneRequest(acceptance=REFERENCE, runs=COSTS))
    assert result.best_k == 4
    assert result.acceptance.source == "given" and result.roofline is None


def test_the_roofline_comes_from_the_request() -> None:
    request = OfflineTuneRequest(
        acceptance=REFERENCE,
        runs=COSTS,
        roofline=RooflineRequest(gpu="RTX A6000", tp=2, weights="54GB"),
    )
    result = recommend_offline(request)
    assert result.roofline is not None
    assert result.roofline.ceiling_tok_s_at_al1 == pytest.approx(768 * 2 / 54)


def test_inputs_at_fault_are_named(tmp_path: Path) -> None:
    with pytest.raises(TuneInputError) as caught:
        recommend_offline(OfflineTuneRequest(acceptance=(0.5, 0.8), runs=COSTS))
    assert caught.value.field == "acceptance"
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(TuneInputError) as caught:
        recommend_offline(OfflineTuneRequest(sources=(broken,)))
    assert caught.value.field == "from"


def bench_report(k: int | None, method: str = "draft_model") -> BenchReport:
    level = reports.level_result(
        mean_tpot_ms=10.0,
        spec_decode_acceptance_length=2.5,
        spec_decode_num_drafts=100,
        spec_decode_draft_tokens=400,
        spec_decode_per_position_acceptance_rates=[0.8, 0.5, 0.2, 0.1],
    )
    report = reports.bench_report(
        [level],
        workload={"max_tokens": 128, "ignore_eos": True},
        method=method,
        num_speculative_tokens=k,
    )
    return report.model_copy(update={"label": "lab-ct1 k=4"})


def test_a_report_in_memory_is_the_run_its_saved_file_gives(tmp_path: Path) -> None:
    report = bench_report(4)
    run = run_from_report(report, "probe 1")
    assert run.label == "probe 1 (lab-ct1 k=4)"
    assert (run.k, run.output_tok_s, run.acceptance) == (4, 100.0, (0.8, 0.5, 0.2, 0.1))
    assert run.drafted_per_draft == 4.0 and run.num_drafts == 100
    saved = report.save(tmp_path / "k4.json")
    (from_file,) = load_runs(saved)
    assert from_file == run.model_copy(update={"label": "k4.json (lab-ct1 k=4)"})


def test_a_report_without_speculation_names_where_it_came_from() -> None:
    with pytest.raises(TuneInputError, match=r"^probe 2: the benchmarked server ran without"):
        run_from_report(bench_report(None, "none"), "probe 2")
