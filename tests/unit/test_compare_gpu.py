"""Issue 37: `compare --engines vllm,sglang==0.5.15 --methods none,dflash` on a real Hopper GPU.

The record is benchmarks/results/gpu-h100-sglang-20261205/compare/compare.json: the product's own
launch and bench over SSH (benchmarks/gpu_compare_device.py made the GPU machine its own loopback
"container"), vLLM 0.26.0 and SGLang 0.5.15, the Qwen3-8B shape with dummy weights. What the
servers were started with is what launch renders today, and `report` reads the file back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dflashops.bench.models import BenchReport
from dflashops.cli import cli
from dflashops.launch.args import TargetFacts, sglang_argv, vllm_argv
from dflashops.playbook.load import load_playbook

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "results" / "gpu-h100-sglang-20261205" / "compare"
PLAYBOOK = REPO / "benchmarks" / "results" / "gpu-h200-compare-playbooks" / "qwen3-8b-dflash.yaml"
CELLS = ["vllm 0.26.0 none", "vllm 0.26.0 dflash", "sglang 0.5.15 none", "sglang 0.5.15 dflash"]


@pytest.fixture(scope="module")
def report() -> BenchReport:
    return BenchReport.load(RUN / "compare.json")


def section(report: BenchReport) -> dict[str, Any]:
    assert report.compare is not None
    return report.compare


def argv(report: BenchReport, cell: str) -> list[str]:
    config = section(report)["levels"][cell]["config"]
    return [str(arg) for arg in config["server_args"]["argv"]]


def test_every_engine_and_method_was_measured(report: BenchReport) -> None:
    rows = section(report)["rows"]
    assert [f"{r['engine']} {r['method']}" for r in rows] == CELLS
    assert section(report)["skipped"] == []
    assert all(r["completed"] == 12 and r["failed"] == 0 for r in rows)
    speculating = [r for r in rows if r["method"] == "dflash"]
    # dummy weights: nothing is accepted, on either engine, by either engine's own counters
    assert [(r["k"], r["acceptance_length"]) for r in speculating] == [(4, 1.0), (4, 1.0)]
    # vLLM counts per position; SGLang's /metrics has no per-position series
    assert [r["per_position_acceptance"] for r in speculating] == [[0.0, 0.0, 0.0, 0.0], None]


def test_the_servers_ran_what_launch_renders_for_each_engine(report: BenchReport) -> None:
    vllm, sglang = argv(report, "vllm 0.26.0 dflash"), argv(report, "sglang 0.5.15 dflash")
    assert json.loads(vllm[vllm.index("--speculative-config") + 1])["num_speculative_tokens"] == 4
    # DFlash needs non-causal attention: launch names FLASH_ATTN for vLLM on a GPU
    assert vllm[vllm.index("--attention-backend") + 1] == "FLASH_ATTN"
    assert sglang[sglang.index("--speculative-num-draft-tokens") + 1] == "5"  # the k + 1 window
    assert sglang[sglang.index("--attention-backend") + 1] == "fa3"  # server.engine_args.sglang
    assert "--max-running-requests" not in vllm and "--max-num-seqs" not in sglang
    # today's renderer gives the same arguments from the committed playbook, engine by engine
    for engine, ran in (("vllm", vllm), ("sglang", sglang)):
        version = "0.26.0" if engine == "vllm" else "0.5.15"
        book = load_playbook(PLAYBOOK, [f"engine.name={engine}", f"engine.version={version}"])
        python = ran[0]
        if engine == "vllm":
            assert vllm_argv(book, python) == ran
        else:
            assert sglang_argv(book, python, TargetFacts()) == ran


def test_report_reads_it_back_with_the_compare_plot(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli, ["report", str(RUN / "compare.json"), "--plots", str(tmp_path), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert str(tmp_path / "compare_methods.png") in json.loads(result.stdout)["plots"]
    assert (tmp_path / "compare_methods.png").stat().st_size > 10_000
