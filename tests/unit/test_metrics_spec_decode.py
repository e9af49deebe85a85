"""Spec-decode counters from scrapes, and their deltas (acceptance length, rate, per position)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.errors import BenchmarkError
from dflashops.metrics.spec_decode import SpecDecodeCounters, delta

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def counters(name: str, model_name: str | None = None) -> SpecDecodeCounters:
    return SpecDecodeCounters.from_scrape((FIXTURES / name).read_text(), model_name=model_name)


def test_real_scrape_counters() -> None:
    real = counters("real-vllm-0.32.0-cpu-ngram.txt")
    assert real.spec_decode
    assert real.num_drafts == 164
    assert real.num_draft_tokens == 600
    assert real.num_accepted_tokens == 592
    assert real.accepted_per_position == {0: 164, 1: 146, 2: 145, 3: 137}
    assert real.generation_tokens == 832
    assert real.num_emitted_tokens is None


def test_delta_from_real_scrape_to_a_later_one() -> None:
    before = counters("real-vllm-0.32.0-cpu-ngram.txt", model_name="tiny")
    after = counters("synthesized-vllm-0.32.0-after.txt", model_name="tiny")
    window = delta(before, after)
    assert window.num_drafts == 100
    assert window.num_draft_tokens == 400
    assert window.num_accepted_tokens == 270
    assert window.accepted_per_position == [95, 75, 60, 40]
    assert window.generation_tokens == 370
    assert window.acceptance_length == pytest.approx(3.7)
    assert window.acceptance_rate == pytest.approx(0.675)
    assert window.per_position_acceptance == pytest.approx([0.95, 0.75, 0.60, 0.40])
    keys = window.vllm_bench_keys()
    assert keys["spec_decode_acceptance_rate"] == pytest.approx(67.5)  # percent, like vLLM
    assert keys["spec_decode_num_drafts"] == 100
    assert keys["spec_decode_per_position_acceptance_rates"] == pytest.approx(
        [0.95, 0.75, 0.6, 0.4]
    )
    dumped = window.model_dump()
    assert dumped["acceptance_length"] == pytest.approx(3.7)


def test_model_filter_drops_other_models() -> None:
    unfiltered = counters("synthesized-vllm-0.32.0-after.txt")
    assert unfiltered.num_drafts == 264 + 1000
    assert unfiltered.accepted_per_position[0] == 259 + 10


def test_engines_are_summed() -> None:
    dp = counters("synthesized-vllm-dp2.txt")
    assert dp.num_drafts == 130
    assert dp.num_draft_tokens == 520
    assert dp.num_accepted_tokens == 337
    assert dp.accepted_per_position == {0: 121, 1: 96, 2: 71, 3: 49}
    assert dp.generation_tokens is None
    zero = SpecDecodeCounters(
        spec_decode=True,
        num_drafts=0,
        num_draft_tokens=0,
        num_accepted_tokens=0,
        accepted_per_position={},
    )
    window = delta(zero, dp)
    assert window.acceptance_length == pytest.approx(1 + 337 / 130)
    assert window.per_position_acceptance[0] == pytest.approx(121 / 130)


def test_v0_counters_derive_drafts_from_emitted_tokens() -> None:
    before = counters("synthesized-vllm-0.6.6-v0-before.txt")
    after = counters("synthesized-vllm-0.6.6-v0-after.txt")
    assert before.num_drafts is None and before.num_emitted_tokens == 176
    window = delta(before, after)
    # 70 verify steps of k=4: 280 draft tokens, 174 accepted, 244 emitted (= accepted + steps)
    assert window.num_drafts == 70
    assert window.num_draft_tokens == 280
    assert window.num_accepted_tokens == 174
    assert window.acceptance_length == pytest.approx(1 + 174 / 70)
    assert window.acceptance_rate == pytest.approx(174 / 280)
    assert window.per_position_acceptance == []
    assert window.generation_tokens == 246


def test_no_spec_decode_on_the_server() -> None:
    plain = SpecDecodeCounters.from_scrape(
        '# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{engine="0"} 10\n'
    )
    assert not plain.spec_decode
    assert plain.num_drafts is None
    later = SpecDecodeCounters.from_scrape('vllm:generation_tokens_total{engine="0"} 25\n')
    window = delta(plain, later)
    assert window.generation_tokens == 15
    assert window.acceptance_length is None
    assert window.acceptance_rate is None
    assert window.per_position_acceptance == []
    assert window.vllm_bench_keys()["spec_decode_acceptance_rate"] is None


def test_counter_going_backwards_means_restart() -> None:
    before = counters("synthesized-vllm-0.32.0-after.txt", model_name="tiny")
    after = counters("real-vllm-0.32.0-cpu-ngram.txt", model_name="tiny")
    with pytest.raises(BenchmarkError, match="went backwards") as caught:
        delta(before, after)
    assert caught.value.hint is not None and "restarted" in caught.value.hint
