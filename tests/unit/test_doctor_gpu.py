"""`doctor`'s GPU rules over recorded `nvidia-smi` output: an H200 idle and under load (real),
a degraded two-GPU host and a driver that reports N/A (synthesized in the same format)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dflashops.doctor.facts import Acceptance, DoctorFacts, GpuFacts
from dflashops.doctor.nvidia import parse_p2p, parse_query
from dflashops.doctor.rules_gpu import eager_mode, gpu_state, p2p, roofline_gap
from dflashops.roofline.model import RooflineSpec
from tests.support.manifests import deployed_manifest

DOCTOR = Path(__file__).resolve().parents[1] / "fixtures" / "doctor"


def read(name: str) -> str:
    return (DOCTOR / name).read_text(encoding="utf-8")


def gpu_facts(query: str, topo: str | None = None, **fields: Any) -> DoctorFacts:
    gpus = tuple(parse_query(read(query)))
    return DoctorFacts(
        container="gpu1",
        running_argv=["python", "-m", "vllm", "serve", "/m", *fields.pop("argv", [])],
        device="cuda",
        gpu=GpuFacts(gpus=gpus, p2p=parse_p2p(read(topo)) if topo else {}),
        **fields,
    )


def test_real_h200_query_parses() -> None:
    idle, load = (
        parse_query(read("real-h200-query-idle.csv")),
        parse_query(read("real-h200-query-load.csv")),
    )
    assert (idle[0].name, idle[0].utilization_pct, idle[0].sm_clock_mhz) == (
        "NVIDIA H200",
        0.0,
        345.0,
    )
    assert (load[0].utilization_pct, load[0].sm_clock_mhz, load[0].power_draw_w) == (
        100.0,
        1515.0,
        691.35,
    )
    assert (load[0].pcie_gen, load[0].pcie_width, load[0].throttle_reasons) == (5, 16, 0x4)
    assert load[0].reasons == ["SW power cap"]
    # one GPU: the P2P matrix has no pair (and its header's terminal escapes are dropped)
    assert parse_p2p(read("real-h200-topo-p2p-r.txt")) == {}


def test_a_healthy_h200_has_no_gpu_finding_idle_or_loaded() -> None:
    idle = gpu_state(gpu_facts("real-h200-query-idle.csv"))
    assert idle.findings == [] and "clocks not judged (GPUs idle when sampled)" in idle.note
    # at full compute load the power cap is reached at the default limit: not a problem
    loaded = gpu_state(gpu_facts("real-h200-query-load.csv"))
    assert loaded.findings == [] and "checked under load on 1 GPU(s)" in loaded.note


def test_every_degraded_cause_is_its_own_finding() -> None:
    result = gpu_state(gpu_facts("synthesized-h200x2-query-load-degraded.csv"))
    titles = [f.title for f in result.findings]
    assert titles == [
        "GPU 0 (NVIDIA H200): power limit lowered to 450 W (default 700 W)",
        "GPU 0 (NVIDIA H200): PCIe link x8 of x16",
        "GPU 1 (NVIDIA H200): clocks slowed down: HW slowdown, HW thermal slowdown",
        "GPU 1 (NVIDIA H200): PCIe gen 4 of 5 under load",
        "GPU 1 (NVIDIA H200): memory clock 2619 of 3201 MHz under load",
    ]
    assert result.findings[0].fix == "on the node: nvidia-smi -i 0 -pl 700"


def test_na_fields_are_unknown_not_zero() -> None:
    (gpu,) = parse_query(read("synthesized-h200-query-na.csv"))
    assert (
        gpu.utilization_pct is None and gpu.power_limit_w is None and gpu.throttle_reasons is None
    )
    assert gpu_state(gpu_facts("synthesized-h200-query-na.csv")).findings == []


def test_p2p_not_supported_under_tensor_parallel() -> None:
    argv = ["--tensor-parallel-size", "2"]
    bad = p2p(
        gpu_facts(
            "synthesized-h200x2-query-load-degraded.csv",
            "synthesized-h200x2-topo-p2p-r-ns.txt",
            argv=argv,
        )
    )
    assert bad.findings[0].evidence == ("GPU0 -> GPU1: NS", "GPU1 -> GPU0: NS")
    good = p2p(
        gpu_facts(
            "synthesized-h200x2-query-load-degraded.csv",
            "synthesized-h200x2-topo-p2p-r-ok.txt",
            argv=argv,
        )
    )
    assert good.findings == [] and good.note == "P2P OK between the 2 TP GPUs"
    assert p2p(gpu_facts("real-h200-query-idle.csv")).skipped.startswith("tensor parallel 1")


def test_p2p_disabled_by_the_preflight() -> None:
    manifest = deployed_manifest(nccl_p2p_disable=True, exec_env={"NCCL_P2P_DISABLE": "1"})
    result = p2p(
        gpu_facts(
            "real-h200-query-idle.csv", manifest=manifest, argv=["--tensor-parallel-size", "2"]
        )
    )
    assert result.findings[0].title == "P2P off under TP 2: NCCL_P2P_DISABLE=1"


def test_decode_far_below_the_roofline_lists_the_causes_it_checked() -> None:
    spec = RooflineSpec(gpu="H200", weight_bytes=16_000_000_000)
    acceptance = Acceptance(
        k=4,
        per_position=(0.6, 0.4, 0.3, 0.2),
        acceptance_length=2.5,
        num_drafts=300,
        source="doctor probe",
        decode_tok_s=200.0,
    )
    facts = gpu_facts(
        "synthesized-h200x2-query-load-degraded.csv",
        roofline=spec,
        acceptance=acceptance,
        argv=["--enforce-eager"],
    )
    finding = roofline_gap(facts).findings[0]
    # 4800 GB/s / 16 GB = 300 steps/s × 2.5 tokens = 750 tok/s; 200 is 27 %
    assert finding.title == "decode at 27% of the bandwidth roofline"
    assert finding.impact == pytest.approx(1 - 200 / 750)
    assert "power limit lowered to 450 W" in finding.evidence[2]
    assert "eager mode on a GPU" in finding.evidence[2]
    healthy = gpu_facts(
        "real-h200-query-load.csv",
        roofline=spec,
        acceptance=acceptance.__class__(**{**acceptance.__dict__, "decode_tok_s": 600.0}),
    )
    assert roofline_gap(healthy).findings == []


def test_eager_mode_matters_on_a_gpu_only() -> None:
    on_gpu = eager_mode(gpu_facts("real-h200-query-idle.csv", argv=["--enforce-eager"]))
    assert on_gpu.findings[0].fix == "dflashops launch gpu1 --set server.enforce_eager=false"
    on_cpu = eager_mode(
        DoctorFacts(container="lab", running_argv=["--enforce-eager"], device="cpu")
    )
    assert on_cpu.findings == []
