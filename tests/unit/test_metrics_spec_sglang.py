"""SGLang's /metrics read in vLLM's spec-decode terms (names as SGLang 0.5.16 writes them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dflashops.metrics.prometheus import Scrape
from dflashops.metrics.spec_decode import SpecDecodeCounters, delta
from dflashops.metrics.spec_sglang import is_sglang, sglang_counts


def sglang_scrape(
    *,
    generated: int,
    requests: int,
    verify: int | None,
    window: float | None = 5.0,
    model: str = "tiny",
) -> str:
    """An SGLang scrape: counters per finished request, gauges per decode log window."""
    label = f'{{model_name="{model}"}}'
    lines = [
        "# TYPE sglang:generation_tokens_total counter",
        f"sglang:generation_tokens_total{label} {generated}.0",
        "# TYPE sglang:num_requests_total counter",
        f"sglang:num_requests_total{label} {requests}.0",
        "# TYPE sglang:num_running_reqs gauge",
        f'sglang:num_running_reqs{{model_name="{model}",tp_rank="0"}} 0.0',
    ]
    if verify is not None:
        lines += [
            "# TYPE sglang:spec_verify_calls_total counter",
            f"sglang:spec_verify_calls_total{label} {verify}.0",
        ]
    if window is not None:
        lines += [
            "# TYPE sglang:spec_num_draft_tokens gauge",
            f'sglang:spec_num_draft_tokens{{model_name="{model}",tp_rank="0"}} {window}',
        ]
    return "\n".join(lines) + "\n"


def test_a_speculating_request_is_read_as_vllm_counts_it() -> None:
    # one request of 41 tokens: 1 from prefill, 10 verify forwards emitting 40 = 10 bonus + 30
    counters = SpecDecodeCounters.from_scrape(sglang_scrape(generated=41, requests=1, verify=10))

    assert counters.spec_decode
    assert counters.num_drafts == 10
    assert counters.num_accepted_tokens == 30
    assert counters.num_draft_tokens == 10 * 4  # window 5 = k 4 drafts + the current token
    assert counters.accepted_per_position == {}
    assert counters.generation_tokens == 41


def test_a_window_between_two_scrapes_gives_vllm_length_and_rate() -> None:
    # the readiness probe (1 token, no verify) came before; two requests finished since
    before = SpecDecodeCounters.from_scrape(sglang_scrape(generated=1, requests=1, verify=None))
    after = SpecDecodeCounters.from_scrape(
        sglang_scrape(generated=1 + 41 + 21, requests=3, verify=10 + 8)
    )

    window = delta(before, after)

    assert window.num_drafts == 18
    assert window.num_accepted_tokens == 30 + 12  # 41 - 10 - 1 and 21 - 8 - 1
    assert window.acceptance_length == pytest.approx(1 + 42 / 18)
    assert window.acceptance_rate == pytest.approx(42 / (18 * 4))
    assert window.per_position_acceptance == []


def test_a_server_that_does_not_speculate_has_no_spec_numbers() -> None:
    before = SpecDecodeCounters.from_scrape(
        sglang_scrape(generated=1, requests=1, verify=None, window=None)
    )
    after = SpecDecodeCounters.from_scrape(
        sglang_scrape(generated=65, requests=3, verify=None, window=None)
    )

    window = delta(before, after)

    assert not after.spec_decode
    assert window.acceptance_length is None
    assert window.acceptance_rate is None
    assert window.generation_tokens == 64


def test_the_window_comes_from_the_steps_gauge_when_the_draft_tokens_gauge_is_missing() -> None:
    text = sglang_scrape(generated=41, requests=1, verify=10, window=None)
    text += '# TYPE sglang:spec_num_steps gauge\nsglang:spec_num_steps{model_name="tiny"} 3.0\n'

    counts = sglang_counts(Scrape.parse(text))

    assert counts.num_draft_tokens == 10 * 3


def test_an_unknown_window_leaves_the_rate_unknown_but_the_length_known() -> None:
    window = delta(
        SpecDecodeCounters.from_scrape(
            sglang_scrape(generated=0, requests=0, verify=None, window=None)
        ),
        SpecDecodeCounters.from_scrape(
            sglang_scrape(generated=41, requests=1, verify=10, window=None)
        ),
    )

    assert window.acceptance_length == pytest.approx(4.0)
    assert window.acceptance_rate is None


def test_only_the_served_models_series_count() -> None:
    text = "".join(
        f"# TYPE sglang:{name} counter\n"
        f'sglang:{name}{{model_name="tiny"}} {tiny}.0\n'
        f'sglang:{name}{{model_name="other"}} {other}.0\n'
        for name, tiny, other in (
            ("generation_tokens_total", 41, 500),
            ("num_requests_total", 1, 5),
            ("spec_verify_calls_total", 10, 100),
        )
    )

    counters = SpecDecodeCounters.from_scrape(text, model_name="tiny")

    assert counters.num_drafts == 10
    assert counters.num_accepted_tokens == 30


def test_a_restarted_server_is_named_not_read_as_negative_counts() -> None:
    from dflashops.errors import BenchmarkError

    before = SpecDecodeCounters.from_scrape(sglang_scrape(generated=410, requests=10, verify=100))
    after = SpecDecodeCounters.from_scrape(sglang_scrape(generated=41, requests=1, verify=10))

    with pytest.raises(BenchmarkError, match="went backwards"):
        delta(before, after)


def test_a_vllm_scrape_is_not_read_as_sglang() -> None:
    text = "# TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total 5.0\n"

    assert not is_sglang(Scrape.parse(text))
    assert not SpecDecodeCounters.from_scrape(text).spec_decode


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def real_window(method: str) -> tuple[SpecDecodeCounters, SpecDecodeCounters]:
    """Two scrapes of a real SGLang 0.5.16 CPU server around four 64-token requests."""
    before, after = (
        (FIXTURES / "metrics" / f"real-sglang-0.5.16-cpu-{method}-{when}.txt").read_text()
        for when in ("before", "after")
    )
    return (
        SpecDecodeCounters.from_scrape(before, model_name="tiny"),
        SpecDecodeCounters.from_scrape(after, model_name="tiny"),
    )


def test_a_real_ngram_window_matches_what_sglang_said_per_request() -> None:
    window = delta(*real_window("ngram"))
    generated = json.loads(
        (FIXTURES / "sglang" / "real-0.5.16-cpu-ngram-generate.json").read_text()
    )
    metas = [r["meta_info"] for r in generated["requests"] if r["path"] == "/generate"]

    # the window holds exactly the four /generate requests whose meta_info was kept
    assert window.generation_tokens == sum(m["completion_tokens"] for m in metas) == 256
    assert window.num_drafts == sum(m["spec_verify_ct"] for m in metas) == 171
    # completion = 1 (prefill) + verify forwards + accepted drafts, per request
    assert window.num_accepted_tokens == sum(
        m["completion_tokens"] - 1 - m["spec_verify_ct"] for m in metas
    )
    # SGLang's own spec_accepted_drafts also counts drafts accepted past max_tokens (one request
    # accepted 4 that were never emitted): dflashops counts the emitted ones, as tok/s sees them
    assert sum(m["spec_accepted_drafts"] for m in metas) - window.num_accepted_tokens == 4
    assert window.num_draft_tokens == 171 * 4  # the verify window gauge: 5 = k 4 + 1
    assert window.acceptance_length == pytest.approx(1 + 81 / 171)


def test_a_real_eagle3_window_with_a_random_drafter_accepts_nothing() -> None:
    before, after = real_window("eagle3")
    window = delta(before, after)

    assert before.spec_decode and after.spec_decode
    assert window.num_drafts == 252 and window.generation_tokens == 256
    assert window.num_accepted_tokens == 0
    assert window.acceptance_length == pytest.approx(1.0)


def test_a_real_server_without_speculation_reads_as_not_speculating() -> None:
    before, after = real_window("none")

    assert not after.spec_decode
    assert delta(before, after).acceptance_length is None
