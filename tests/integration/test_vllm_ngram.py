"""n-gram (prompt lookup) drafting on a real vLLM server with self-repeating prompts."""

from __future__ import annotations

import pytest

from tests.support.vllm_servers import VllmServer, complete_prompts, spec_decode_counts

pytestmark = pytest.mark.vllm


def test_ngram_server_drafts_from_repeated_prompts(ngram_server: VllmServer) -> None:
    drafts_before, _ = spec_decode_counts(ngram_server.metrics())
    bodies = complete_prompts(ngram_server, "ngram")
    assert bodies
    for body in bodies:
        assert body["usage"]["completion_tokens"] == body["max_tokens"]
    drafts_after, _ = spec_decode_counts(ngram_server.metrics())
    # a repeated prompt always offers a lookup match right after the prompt
    assert drafts_after - drafts_before >= len(bodies)
    assert ngram_server.preflight_report()["drafter_validation"] is None
