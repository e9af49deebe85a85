"""n-gram (prompt lookup) drafting on a real vLLM server with self-repeating prompts."""

from __future__ import annotations

import pytest

from tests.support.vllm_servers import MODEL_NAME, VllmServer, spec_decode_counts

pytestmark = pytest.mark.vllm


def test_ngram_server_drafts_from_repeated_prompts(ngram_server: VllmServer) -> None:
    drafts_before, _ = spec_decode_counts(ngram_server.metrics())
    records = ngram_server.models.read_prompts("ngram")
    assert records
    with ngram_server.client() as client:
        for record in records:
            response = client.post(
                "/v1/completions",
                json={
                    "model": MODEL_NAME,
                    "prompt": record["prompt"],
                    "max_tokens": record["max_tokens"],
                    "temperature": 0,
                    "ignore_eos": True,
                },
            )
            assert response.status_code == 200, response.text
            assert response.json()["usage"]["completion_tokens"] == record["max_tokens"]
    drafts_after, _ = spec_decode_counts(ngram_server.metrics())
    # a repeated prompt always offers a lookup match right after the prompt
    assert drafts_after - drafts_before >= len(records)
    assert ngram_server.preflight_report()["drafter_validation"] is None
