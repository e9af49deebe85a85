"""The server spec: JSON round trip and the mistakes it refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dflashops.server.spec import ServerSpec, SpecError


def spec_dict(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "engine": "vllm",
        "engine_version": "0.32.0",
        "argv": ["vllm", "serve", "/models/target"],
        "model": "/models/target",
        "drafter": "/models/drafter",
        "method": "dflash",
        "num_speculative_tokens": 4,
        "tensor_parallel_size": 2,
        "expect_cuda": True,
        "min_shm_bytes": 2**30,
        "env": {"VLLM_LOG_STATS_INTERVAL": "1"},
        "preflight_report": "/run/dflashops/preflight.json",
    }
    data.update(changes)
    return data


def test_round_trip_keeps_every_field() -> None:
    spec = ServerSpec.from_dict(spec_dict())
    again = ServerSpec.from_json(spec.to_json())
    assert again == spec
    assert again.tensor_parallel_size == 2
    assert again.env == {"VLLM_LOG_STATS_INTERVAL": "1"}
    # defaults are written out, so the rendered file says everything preflight will do
    assert json.loads(spec.to_json())["auto_nccl_p2p"] is True


def test_minimal_spec_gets_defaults() -> None:
    spec = ServerSpec.from_dict(
        {"engine": "sglang", "engine_version": "0.5.11", "argv": ["python"], "model": "m"}
    )
    assert spec.expect_cuda is True
    assert spec.tensor_parallel_size == 1
    assert spec.drafter is None
    assert not spec.needs_drafter_files()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"engine": "tgi"}, "engine must be one of vllm, sglang"),
        ({"argv": []}, "argv must be a non-empty list"),
        ({"argv": ["vllm", ""]}, "argv must be a non-empty list"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be at least 1"),
        ({"tensor_parallel_size": True}, "tensor_parallel_size must be int, not bool"),
        ({"tensor_parallel_size": "2"}, "tensor_parallel_size must be int, not str"),
        ({"drafter": None}, "method 'dflash' needs a drafter path"),
        ({"min_shm_bytes": -1}, "byte limits must not be negative"),
        ({"env": {"A": 1}}, "env must map strings to strings"),
        ({"expect_gpu": True}, "unknown spec keys: expect_gpu"),
        ({"spec_version": 9}, "spec_version 9 is not 1"),
    ],
)
def test_invalid_specs_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        ServerSpec.from_dict(spec_dict(**changes))


def test_missing_required_keys_are_named() -> None:
    data = spec_dict()
    del data["model"], data["argv"]
    with pytest.raises(SpecError, match="missing spec keys: argv, model"):
        ServerSpec.from_dict(data)


def test_not_json_and_not_an_object() -> None:
    with pytest.raises(SpecError, match="not JSON"):
        ServerSpec.from_json("{engine: vllm")
    with pytest.raises(SpecError, match="must be a JSON object"):
        ServerSpec.from_json("[1, 2]")


def test_ngram_needs_no_drafter_files() -> None:
    spec = ServerSpec.from_dict(spec_dict(method="ngram", drafter=None))
    assert not spec.needs_drafter_files()
