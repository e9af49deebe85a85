"""The decaying draft on a real vLLM server: per-position acceptance falls from position 0 to 3.

The prompts and the draft come from the lab model build, which calibrated the draft offline on
exactly these prompts (``acceptance.json``); the server's counters must tell the same story.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from tests.support.vllm_servers import (
    NUM_SPECULATIVE_TOKENS,
    VllmServer,
    complete_prompts,
    spec_decode_counts,
)

pytestmark = pytest.mark.vllm


def test_decaying_draft_acceptance_decays_per_position(
    decay_server: VllmServer, record_property: Callable[[str, object], None]
) -> None:
    drafts_before, before = spec_decode_counts(decay_server.metrics())
    complete_prompts(decay_server, "decay")
    drafts_after, after = spec_decode_counts(decay_server.metrics())
    drafts = drafts_after - drafts_before
    assert drafts >= 50
    rates = [(after[pos] - before.get(pos, 0.0)) / drafts for pos in range(NUM_SPECULATIVE_TOKENS)]
    record_property("per_position_acceptance", [round(r, 3) for r in rates])
    print(f"decaying draft, per-position acceptance over {drafts:.0f} drafts: {rates}")

    assert rates[0] > rates[3] + 0.2
    assert 0.5 < rates[0] < 0.95
    assert 0.05 < rates[3] < 0.5
    offline = json.loads(decay_server.models.acceptance.read_text())["per_position"]
    for online_rate, offline_rate in zip(rates, offline, strict=True):
        assert abs(online_rate - offline_rate) < 0.15, (rates, offline)
