"""The bench report's roofline: facts parsed, the plan from facts and overrides, the section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.bench.models import BenchReport
from dflashops.bench.roofline import (
    RooflineFacts,
    attach_roofline,
    gpu_names,
    plan_roofline,
    tp_from_argv,
    weights_from_listing,
)
from dflashops.cli import cli
from dflashops.roofline.request import RooflineRequest, WeightSize
from tests.unit.test_bench_client import FakeOpenAIServer
from tests.unit.test_report_bench import report

GB = 10**9
WEIGHTS_27B = WeightSize(bytes=54 * GB, source="safetensors file sizes in /models/t (11 file(s))")


def test_gpu_names_one_per_line() -> None:
    stdout = "NVIDIA RTX A6000\nNVIDIA RTX A6000\n\n"
    assert gpu_names(stdout) == ("NVIDIA RTX A6000", "NVIDIA RTX A6000")


def test_weights_listing_counts_only_indexed_shards() -> None:
    listing = (
        "4000000000\tmodel-00001-of-00002.safetensors\n"
        "1000000000\tmodel-00002-of-00002.safetensors\n"
        "5000000000\tconsolidated.safetensors\n"
    )
    index = json.dumps(
        {
            "weight_map": {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00002-of-00002.safetensors",
            }
        }
    )
    size, problem = weights_from_listing(listing, index, model_dir="/models/t")
    assert problem is None and size is not None
    assert size.bytes == 5 * GB
    assert size.source == "safetensors file sizes in /models/t (2 file(s))"
    unindexed, _ = weights_from_listing(listing, None, model_dir="/models/t")
    assert unindexed is not None and unindexed.bytes == 10 * GB


@pytest.mark.parametrize(
    ("listing", "index", "problem"),
    [
        ("", None, "/m: no .safetensors files"),
        ("10\ta.safetensors\n", '{"weight_map": {"x": "b.safetensors"}}', "shard b.safetensors"),
        ("10\ta.safetensors\n", "not json", "no weight_map"),
    ],
)
def test_weights_listing_problems(listing: str, index: str | None, problem: str) -> None:
    size, said = weights_from_listing(listing, index, model_dir="/m")
    assert size is None and said is not None and problem in said


def test_tp_from_argv_spellings() -> None:
    assert tp_from_argv(["vllm", "serve", "/m", "--tensor-parallel-size", "2"]) == 2
    assert tp_from_argv(["serve", "--tensor-parallel-size=4"]) == 4
    assert tp_from_argv(["sglang", "--tp-size", "8"]) == 8
    assert tp_from_argv(["serve", "/m"]) is None


def test_plan_from_probed_facts() -> None:
    facts = RooflineFacts(gpus=("NVIDIA RTX A6000", "NVIDIA RTX A6000"), weights=WEIGHTS_27B)
    plan = plan_roofline(RooflineRequest(), facts, tp=2, tp_source="deployed.json")
    assert plan.spec is not None
    assert (plan.spec.gpu, plan.spec.tp, plan.spec.weight_bytes) == ("NVIDIA RTX A6000", 2, 54 * GB)
    assert plan.sources == {
        "gpu": "nvidia-smi",
        "tp": "deployed.json",
        "weights": WEIGHTS_27B.source,
    }
    assert plan.notes == ()


def test_plan_overrides_win_over_facts() -> None:
    facts = RooflineFacts(gpus=("NVIDIA RTX A6000",), weights=WEIGHTS_27B)
    request = RooflineRequest(bandwidth_gbps=1000, tp=1, weights="10GB")
    plan = plan_roofline(request, facts, tp=2)
    assert plan.spec is not None
    assert (plan.spec.bandwidth_gbps, plan.spec.gpu, plan.spec.tp) == (1000, None, 1)
    assert plan.spec.weight_bytes == 10 * GB
    assert plan.sources == {"bandwidth": "--bandwidth-gbps", "tp": "--tp", "weights": "--weights"}


def test_plan_explains_what_is_missing() -> None:
    cpu = plan_roofline(RooflineRequest(), RooflineFacts(), device="cpu")
    assert cpu.spec is None and "runs on cpu; give --bandwidth-gbps" in cpu.notes[0]
    failed = RooflineFacts(problems=("`nvidia-smi …` in ct failed (exit 127); give --gpu",))
    nothing = plan_roofline(RooflineRequest(), failed)
    assert nothing.spec is None
    assert nothing.notes == (
        failed.problems[0],
        "no roofline: the roofline needs a GPU or a bandwidth",
    )
    unknown = plan_roofline(
        RooflineRequest(), RooflineFacts(gpus=("Tesla K80",), weights=WEIGHTS_27B)
    )
    assert unknown.spec is None and "unknown GPU 'Tesla K80'" in unknown.notes[-1]
    mixed = plan_roofline(
        RooflineRequest(),
        RooflineFacts(gpus=("NVIDIA H200", "NVIDIA H100 80GB HBM3"), weights=WEIGHTS_27B),
    )
    assert mixed.spec is not None and mixed.notes[0].startswith("mixed GPUs")


def test_attach_reports_fraction_at_concurrency_1() -> None:
    run = report("dflash", 4, 25.0, [90, 70, 50, 30])  # 40 tok/s at c=1, AL 3.4
    plan = plan_roofline(RooflineRequest(gpu="RTX A6000", tp=2), RooflineFacts(weights=WEIGHTS_27B))
    section = attach_roofline(run, plan).roofline
    assert section is not None
    ceiling_al1 = 768 * 2 / 54  # GB/s x tp / GB per step
    assert section["ceiling_tok_s_at_al1"] == pytest.approx(ceiling_al1)
    assert section["acceptance_length"] == pytest.approx(3.4)
    assert section["ceiling_tok_s"] == pytest.approx(ceiling_al1 * 3.4)
    assert section["measured_tok_s"] == pytest.approx(40.0)
    assert section["fraction_of_ceiling"] == pytest.approx(40 / (ceiling_al1 * 3.4))
    assert section["above_ceiling"] is False
    assert section["concurrency"] == 1 and "1000 / mean TPOT" in section["measured_as"]
    assert section["sources"]["gpu"] == "--gpu"


def test_attach_flags_a_rate_above_the_ceiling() -> None:
    run = report("none", None, 5.0, None)  # 200 tok/s, no speculation: AL 1
    plan = plan_roofline(RooflineRequest(gpu="RTX A6000", weights="54GB"), None)
    attached = attach_roofline(run, plan)
    assert attached.roofline is not None and attached.roofline["above_ceiling"] is True
    assert attached.roofline["acceptance_length"] == 1.0
    (warning,) = attached.warnings
    assert "above the ceiling 14.2 tok/s" in warning and "likely a measurement error" in warning


def test_attach_without_a_plan_keeps_the_notes() -> None:
    run = report("none", None, 5.0, None)
    plan = plan_roofline(RooflineRequest(), RooflineFacts(), device="cpu")
    attached = attach_roofline(run, plan)
    assert attached.roofline is None and attached.notes[-1].startswith("no roofline")


def test_bench_url_with_roofline_options(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    with FakeOpenAIServer(first_delay=0.01, chunk_delay=0.005) as srv:
        args = ["bench", "--url", srv.url, "-n", "2", "--out", str(out)]
        result = CliRunner().invoke(
            cli, [*args, "--bandwidth-gbps", "1", "--weights", "1GB"], env={"COLUMNS": "150"}
        )
    assert result.exit_code == 0, result.output
    saved = BenchReport.load(out)
    assert saved.roofline is not None
    assert saved.roofline["ceiling_tok_s_at_al1"] == pytest.approx(1.0)
    assert saved.roofline["sources"] == {"bandwidth": "--bandwidth-gbps", "weights": "--weights"}
    assert "roofline: given 1 GB/s x tp 1 / 1 GB per step = 1.0 tok/s" in result.output
    assert "likely a measurement error" in result.output  # a fake server beats 1 GB/s


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "http://127.0.0.1:9", "--gpu", "H200"], "needs --weights"),
        (["--url", "http://127.0.0.1:9", "--weights", "5GB"], "--weights is for the roofline"),
        (["--url", "http://127.0.0.1:9", "--no-roofline"], "--no-roofline is for NAME"),
        (["ct", "--no-roofline", "--gpu", "H200"], "which --no-roofline skips"),
    ],
)
def test_bench_roofline_usage_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["bench", *args])
    assert result.exit_code == 2 and message in result.stderr


def test_real_nvidia_smi_output_resolves_to_the_table() -> None:
    # captured on a real H200 host (driver 580.159.04) with GPU_QUERY
    fixture = Path(__file__).parents[1] / "fixtures/roofline/nvidia-smi-query-gpu-name-h200.txt"
    facts = RooflineFacts(gpus=gpu_names(fixture.read_text()), weights=WEIGHTS_27B)
    assert facts.gpus == ("NVIDIA H200",)
    plan = plan_roofline(RooflineRequest(), facts, tp=1)
    assert plan.spec is not None
    section = attach_roofline(report("none", None, 20.0, None), plan).roofline
    assert section is not None and section["bandwidth_gbps"] == 4800
    assert section["bandwidth_source"].startswith("H200: vendor spec value")
