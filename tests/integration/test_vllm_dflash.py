"""A real vLLM CPU server with the lab's DFlash drafter, started through the bundled server."""

from __future__ import annotations

import time

import pytest

from tests.support.vllm_servers import (
    MODEL_NAME,
    NUM_SPECULATIVE_TOKENS,
    VllmServer,
    spec_decode_counts,
)

pytestmark = pytest.mark.vllm


def test_dflash_server_answers_chat_and_counts_drafts(dflash_server: VllmServer) -> None:
    chat = dflash_server.models.read_prompts("chat")[0]
    with dflash_server.client() as client:
        response = client.post(
            "/v1/chat/completions",
            json={
                "model": MODEL_NAME,
                "messages": chat["messages"],
                "max_tokens": 24,
                "temperature": 0,
                "ignore_eos": True,
            },
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"]
    assert body["usage"]["completion_tokens"] == 24

    metrics = dflash_server.metrics()
    drafts, per_position = spec_decode_counts(metrics)
    assert drafts > 0
    assert sorted(per_position) == list(range(NUM_SPECULATIVE_TOKENS))
    for family in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        assert f"vllm:spec_decode_{family}_total{{" in metrics


def test_dflash_server_went_through_preflight(dflash_server: VllmServer) -> None:
    report = dflash_server.preflight_report()
    assert report["ok"] is True
    assert [c["name"] for c in report["checks"]] == [
        "engine",
        "model",
        "drafter",
        "drafter-config",
        "shm",
        "gpus",
    ]
    # the validator reads this drafter as a correct DFlash config for vLLM 0.32.0
    assert report["drafter_validation"]["status"] in ("clean", "warnings")
    log = dflash_server.log()
    assert "dflashops-server: preflight ok" in log
    # vLLM reads target_layer_ids [0, 1, 2] and adds 1
    assert "Using auxiliary layers from speculative config: (1, 2, 3)" in log


def test_dflash_server_logs_spec_decoding_lines(dflash_server: VllmServer) -> None:
    with dflash_server.client() as client:
        client.post(
            "/v1/completions",
            json={"model": MODEL_NAME, "prompt": "The keeper", "max_tokens": 16, "temperature": 0},
        ).raise_for_status()
    deadline = time.monotonic() + 15
    while "SpecDecoding metrics:" not in dflash_server.log():
        assert time.monotonic() < deadline, "no SpecDecoding line within 15 s (interval is 1 s)"
        time.sleep(0.5)
