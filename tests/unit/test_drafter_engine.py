"""What each engine version does with a DFlash drafter."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dflashops.drafter import read_drafter
from dflashops.drafter.engine import DrafterShape, EngineSpec, engine_findings, parse_engine
from dflashops.drafter.validate import validate_drafter
from dflashops.errors import DrafterError
from tests.fixtures.drafter import CORRECTED, GUESSED

MIXED = DrafterShape(has_sliding=True, has_full=True)
ALL_SLIDING = DrafterShape(has_sliding=True, has_full=False)
ALL_FULL = DrafterShape(has_sliding=False, has_full=True)


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("vllm==0.26.0", EngineSpec("vllm", (0, 26, 0))),
        ("vLLM==0.26", EngineSpec("vllm", (0, 26, 0))),
        ("vllm == 0.19.1rc1.dev102", EngineSpec("vllm", (0, 19, 1))),
        ("sglang==0.5.11", EngineSpec("sglang", (0, 5, 11))),
    ],
)
def test_parse_engine(text: str, spec: EngineSpec) -> None:
    assert parse_engine(text) == spec


@pytest.mark.parametrize("text", ["vllm", "vllm>=0.26", "tgi==1.0", "vllm==x", ""])
def test_parse_engine_rejects(text: str) -> None:
    with pytest.raises(DrafterError, match="ENGINE==VERSION"):
        parse_engine(text)


@pytest.mark.parametrize(
    ("engine", "shape", "expected", "env"),
    [
        ("vllm==0.19.1", ALL_FULL, {("engine", "error")}, {}),
        ("vllm==0.20.0", ALL_FULL, {("engine.target_layer_ids", "warning")}, {}),
        ("vllm==0.21.0", ALL_FULL, {("engine.target_layer_ids", "warning")}, {}),
        ("vllm==0.22.0", ALL_FULL, set(), {}),
        ("vllm==0.22.0", MIXED, {("engine.layer_types", "error")}, {}),
        ("vllm==0.24.0", ALL_SLIDING, {("engine.layer_types", "error")}, {}),
        ("vllm==0.25.0", MIXED, {("engine.layer_types", "error")}, {}),
        ("vllm==0.25.1", ALL_SLIDING, set(), {}),
        (
            "vllm==0.26.0",
            MIXED,
            {("engine.layer_types", "info")},
            {"VLLM_USE_V2_MODEL_RUNNER": "1"},
        ),
        (
            "vllm==0.32.0",
            MIXED,
            {("engine.layer_types", "info")},
            {"VLLM_USE_V2_MODEL_RUNNER": "1"},
        ),
        ("vllm==0.32.0", ALL_FULL, set(), {}),
        ("vllm==0.34.0", MIXED, set(), {}),
        ("sglang==0.5.10", MIXED, {("engine", "error")}, {}),
        ("sglang==0.5.11", replace(MIXED, model_type="qwen3"), set(), {}),
        # the speculators layout (no top-level model_type): SGLang's AutoConfig refuses it
        ("sglang==0.5.16", MIXED, {("model_type", "error")}, {}),
    ],
)
def test_engine_rules(
    engine: str, shape: DrafterShape, expected: set[tuple[str, str]], env: dict[str, str]
) -> None:
    findings, required = engine_findings(parse_engine(engine), shape)
    assert {(f.key, f.severity) for f in findings} == expected
    assert required == env
    assert all(f.why for f in findings)


def test_sample_from_anchor_is_refused_by_0_34() -> None:
    shape = DrafterShape(sample_from_anchor=True)
    findings, _ = engine_findings(parse_engine("vllm==0.34.0"), shape)
    assert [(f.key, f.severity) for f in findings] == [("engine.sample_from_anchor", "error")]


def test_required_env_reaches_the_result_for_the_real_drafter() -> None:
    drafter = read_drafter(str(CORRECTED))
    result = validate_drafter(drafter, engine=parse_engine("vllm==0.28.0"))
    assert result.required_env == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    assert result.exit_code == 0
    assert validate_drafter(drafter, engine=parse_engine("vllm==0.25.0")).exit_code == 4
    # the guessed (all-full) drafter runs "fine" on 0.24 - which is exactly why nothing warned
    guessed = validate_drafter(read_drafter(str(GUESSED)), engine=parse_engine("vllm==0.24.0"))
    assert not {f.key for f in guessed.findings} & {"engine", "engine.layer_types"}
