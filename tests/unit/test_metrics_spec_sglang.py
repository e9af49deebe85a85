"""SGLang's /metrics read in vLLM's spec-decode terms (names as SGLang 0.5.16 writes them)."""

from __future__ import annotations

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
