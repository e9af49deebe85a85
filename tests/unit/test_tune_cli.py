"""``dflashops tune-offline``: the recommendation, --json, --from files and usage errors; and
``tune`` (live) pointing there when given offline options."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from dflashops.cli import cli

REFERENCE = "0.80,0.574,0.40,0.236,0.1,0.05,0.02"
COSTS = ["1:0.020", "2:0.022", "4:0.026", "8:0.034", "15:0.048"]


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["tune-offline", *args])


def run_json(*args: str) -> dict[str, Any]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)  # the whole of stdout is one document
    assert isinstance(document, dict)
    return document


def reference_args() -> list[str]:
    args = ["--acceptance", REFERENCE]
    for cost in COSTS:
        args += ["--step-cost", cost]
    return args


def test_reference_curve_recommends_small_k_in_a_table() -> None:
    result = run(*reference_args())
    assert result.exit_code == 0, result.output
    assert "k* = 4" in result.stdout
    assert "Predicted single-stream tok/s per k" in result.stdout
    assert "18.000 ms + 2.000 ms" in result.stdout
    assert "assumptions:" in result.stdout


def test_json_is_one_document_with_predictions_fit_and_assumptions() -> None:
    document = run_json(*reference_args())
    assert 4 <= document["best_k"] <= 6
    assert [row["k"] for row in document["predictions"]] == list(range(1, 16))
    best = document["predictions"][document["best_k"] - 1]
    assert best["throughput_tok_s"] == pytest.approx(document["best_throughput_tok_s"])
    assert document["step_cost"]["kind"] == "linear"
    assert len(document["step_cost"]["points"]) == 5
    assert document["acceptance"]["tail_ratio"] == pytest.approx(0.4)
    assert any("unconditional" in text for text in document["assumptions"])
    assert document["roofline"] is None


def test_comma_lists_and_milliseconds_equal_repeated_options() -> None:
    repeated = run_json(*reference_args())
    compact = run_json(
        "--acceptance",
        REFERENCE,
        "--step-cost",
        "1:20ms,2:22ms 4:26ms",
        "--step-cost",
        "8:0.034s,15:48ms",
    )
    assert compact["predictions"] == repeated["predictions"]


def test_always_accepting_and_steep_curves() -> None:
    flat = run_json(
        "--acceptance", ",".join(["1.0"] * 15), *[arg for c in COSTS for arg in ("--step-cost", c)]
    )
    assert flat["best_k"] == 15
    steep = run_json("--acceptance", "0.3,0.05,0.01", "--step-cost", ",".join(COSTS))
    assert steep["best_k"] in (1, 2)


def test_conditional_rates_and_range_and_tolerance() -> None:
    conditional = run_json(
        "--acceptance", "0.8,0.7175,0.6969", "--conditional", "--step-cost", "1:0.02,4:0.026"
    )
    assert conditional["acceptance"]["rates"] == pytest.approx([0.8, 0.574, 0.4], abs=1e-3)
    narrow = run_json(*reference_args(), "--k-min", "5", "--k-max", "8")
    assert narrow["best_k"] == 5
    assert [row["k"] for row in narrow["predictions"]] == [5, 6, 7, 8]
    assert run_json(*reference_args(), "--tolerance", "0.01")["best_k"] == 3


def test_throughput_measurements_from_the_issue() -> None:
    rates = "0.80,0.53,0.32,0.22,0.15,0.10,0.07,0.05,0.03,0.02,0.01"
    document = run_json("--acceptance", rates, "--throughput", "15:40,6:61.3")
    assert 3 <= document["best_k"] <= 6
    measured = {row["k"]: row["measured_tok_s"] for row in document["predictions"]}
    assert measured[15] == 40 and measured[6] == 61.3


def test_ngram_drafted_per_draft() -> None:
    document = run_json(
        "--acceptance",
        "0.45,0.4,0.35,0.3",
        "--drafted-per-draft",
        "2",
        "--step-cost",
        "1:0.0205,4:0.022",
    )
    assert document["predictions"][3]["drafted_tokens"] == pytest.approx(2.0)
    assert any("fewer than k" in text for text in document["assumptions"])


def test_from_file_runs(tmp_path: Path) -> None:
    report = tmp_path / "runs.json"
    report.write_text(
        json.dumps(
            {
                "runs": [
                    {"k": 15, "step_time_s": 0.048, "acceptance": [0.8, 0.574, 0.4, 0.236, 0.1]},
                    {"k": 1, "step_time_s": 0.020, "acceptance": [0.8]},
                    {"k": 8, "output_tok_s": 93.76, "acceptance_length": 3.188},
                ]
            }
        )
    )
    document = run_json("--from", str(report))
    assert 4 <= document["best_k"] <= 6
    # per-position acceptance from the two runs that have it; the third contributes its timing
    assert "2 run(s)" in document["acceptance"]["source"]
    assert [p["k"] for p in document["step_cost"]["points"]] == [15, 1, 8]
    # a bare list works too, and an explicit --acceptance replaces the merged curve
    report.write_text(json.dumps([{"k": 15, "step_time_s": 0.048}, {"k": 1, "step_time_s": 0.02}]))
    override = run_json("--from", str(report), "--acceptance", REFERENCE)
    assert override["acceptance"]["source"] == "given"


def test_roofline_options_add_ceilings_and_flag_impossible_measurements() -> None:
    args = ["--acceptance", REFERENCE, "--gpu", "RTX A6000", "--tp", "2", "--weights", "54GB"]
    document = run_json(*args, "--throughput", "1:20,4:60")
    roof = document["roofline"]
    assert roof["ceiling_tok_s_at_al1"] == pytest.approx(768 * 2 / 54)
    assert document["predictions"][0]["ceiling_tok_s"] == pytest.approx(768 * 2 / 54 * 1.8)
    assert not any("above the bandwidth ceiling" in w for w in document["warnings"])
    # 60 tok/s at k=1 (AL 1.8) would need more than the A6000's bandwidth
    flagged = run_json(*args, "--throughput", "1:60,4:100")
    assert any("k=1: measured 60.0" in w and "measurement error" in w for w in flagged["warnings"])
    table = run(*args, "--throughput", "1:60,4:100")
    assert table.exit_code == 0 and "roofline:" in table.stdout and "warning:" in table.stdout


def test_roofline_reads_safetensors_headers(tmp_path: Path) -> None:
    header = json.dumps(
        {"w": {"dtype": "BF16", "shape": [1000, 1000], "data_offsets": [0, 2_000_000]}}
    ).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    document = run_json(
        "--acceptance",
        "0.5",
        "--step-cost",
        "1:0.02,2:0.021",
        "--bandwidth-gbps",
        "1",
        "--weights",
        str(tmp_path),
        "--active-params",
        "500K",
    )
    assert document["roofline"]["bytes_per_step"] == 1_000_000
    assert document["roofline"]["ceiling_tok_s_at_al1"] == pytest.approx(1000)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give --acceptance"),
        (["--acceptance", "80,50", "--step-cost", "1:0.02,2:0.03"], "outside [0, 1]"),
        (["--acceptance", "0.5,0.8", "--step-cost", "1:0.02,2:0.03"], "--conditional"),
        (["--acceptance", "0.5,x", "--step-cost", "1:0.02,2:0.03"], "not a number"),
        (["--acceptance", "0.5", "--step-cost", "1=0.02"], "K:VALUE"),
        (["--acceptance", "0.5", "--step-cost", "0:0.02"], "K:VALUE"),
        (["--acceptance", "0.5", "--step-cost", "1:-3"], "positive duration"),
        (["--acceptance", "0.5", "--step-cost", "4:0.02"], "only one k"),
        (["--acceptance", "0.5"], "no step times"),
        (["--acceptance", "0.5", "--throughput", "1:fast"], "positive number"),
        (["--conditional", "--step-cost", "1:0.02"], "give --acceptance too"),
        (
            ["--acceptance", "0.5", "--step-cost", "1:0.02,2:0.03", "--k-min", "5", "--k-max", "3"],
            "above k_max",
        ),
        (["--acceptance", "0.5", "--step-cost", "1:0.02,2:0.03", "--k-max", "99"], "--k-max"),
        (["--acceptance", "0.5", "--step-cost", "1:0.02,2:0.03", "--tp", "2"], "--gpu"),
        (["--acceptance", "0.5", "--step-cost", "1:0.02,2:0.03", "--gpu", "A6000"], "--weights"),
        (
            [
                "--acceptance",
                "0.5",
                "--step-cost",
                "1:0.02,2:0.03",
                "--gpu",
                "A100",
                "--weights",
                "1GB",
            ],
            "ambiguous",
        ),
        (
            [
                "--acceptance",
                "0.5",
                "--step-cost",
                "1:0.02,2:0.03",
                "--gpu",
                "H200",
                "--weights",
                "1GB",
                "--active-params",
                "3B",
            ],
            "total count",
        ),
        (["--from", "/nonexistent/runs.json"], "does not exist"),
    ],
)
def test_usage_errors_exit_2(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""


def test_bad_from_files_exit_2(tmp_path: Path) -> None:
    typo = tmp_path / "typo.json"
    typo.write_text(json.dumps({"runs": [{"k": 4, "step_time_s": 0.02, "acceptence": [0.5]}]}))
    result = run("--from", str(typo))
    assert result.exit_code == 2
    assert "runs.0.acceptence" in result.stderr and "typo.json" in result.stderr
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    assert "not JSON" in run("--from", str(broken)).stderr
    rising = tmp_path / "rising.json"
    rising.write_text(json.dumps([{"k": 2, "step_time_s": 0.02, "acceptance": [0.2, 0.9]}]))
    result = run("--from", str(rising))
    assert result.exit_code == 2 and "rising.json#0" in result.stderr


def test_help_states_the_model() -> None:
    result = run("--help")
    assert result.exit_code == 0
    assert "UNCONDITIONAL" in result.stdout
    assert "1 + R_0 + ... + R_{k-1}" in result.stdout
    assert "geometrically" in result.stdout
    assert "--drafted-per-draft" in result.stdout
    assert "Examples:" in result.stdout and "dflashops tune-offline --acceptance" in result.stdout
    assert "dflashops tune NAME" in result.stdout  # where the live tuner is
    top = CliRunner().invoke(cli, ["--help"])
    assert "tune-offline" in top.stdout and "tune " in top.stdout


def test_live_help_teaches_how_assumptions_and_examples() -> None:
    result = CliRunner().invoke(cli, ["tune", "--help"])
    assert result.exit_code == 0
    assert "tune [OPTIONS] NAME" in result.stdout
    for section in ("How:", "Assumptions:", "Examples:", "dflashops tune lab-ct1"):
        assert section in result.stdout
    assert "--acceptance" not in result.stdout  # offline options live in tune-offline


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--acceptance", "0.5", "--step-cost", "1:0.02"], "--acceptance is for offline tuning"),
        (["lab-ct1", "--from", "runs.json"], "--from is for offline tuning"),
        (["lab-ct1", "--gpu", "H200"], "--gpu is for offline tuning"),
        (["--tolerance", "0.1"], "--tolerance is for offline tuning"),
        ([], "missing container NAME"),
    ],
)
def test_live_tune_points_offline_options_to_tune_offline(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["tune", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and "dflashops tune-offline" in result.stderr
    assert result.stdout == ""


def test_live_tune_unknown_option_stays_a_plain_usage_error() -> None:
    result = CliRunner().invoke(cli, ["tune", "lab-ct1", "--bogus"])
    assert result.exit_code == 2
    assert "No such option" in result.stderr and "tune-offline" not in result.stderr


def test_live_tune_range_is_checked_before_anything_runs() -> None:
    # no inventory is given: the request is refused before the inventory would be read
    result = CliRunner().invoke(cli, ["tune", "lab-ct1", "--k-min", "5", "--k-max", "2"])
    assert result.exit_code == 2
    assert "--k-min 5 is above --k-max 2" in result.stderr


def test_roofline_floor_raises_impossible_extrapolated_step_times() -> None:
    # the issue's two measurements on 2×A6000 with a 27B bf16 target: a line through k=15 and
    # k=6 extrapolates k=1 to 33.2 ms, faster than the 35.2 ms the weights take to stream once
    rates = "0.80,0.53,0.32,0.22,0.15,0.10,0.07,0.05,0.03,0.02,0.01"
    args = ["--acceptance", rates, "--throughput", "15:40,6:61.3"]
    free = run_json(*args)
    bound = run_json(*args, "--gpu", "RTX A6000", "--tp", "2", "--weights", "54GB")
    floor_s = 54 / (768 * 2)
    first = bound["predictions"][0]
    assert first["at_floor"] and first["step_time_s"] == pytest.approx(floor_s)
    assert free["predictions"][0]["step_time_s"] < floor_s
    assert first["throughput_tok_s"] == pytest.approx(first["ceiling_tok_s"])
    assert all(
        row["throughput_tok_s"] <= row["ceiling_tok_s"] + 1e-9 for row in bound["predictions"]
    )
    assert any("k=1 is below the 35.16 ms" in w for w in bound["warnings"])
    assert any("never below 35.16 ms" in a for a in bound["assumptions"])
    assert 3 <= bound["best_k"] <= 6
