"""Log windows per vLLM version (V0 included) and SGLang: the real CPU log and synthesized lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.errors import ParseError
from dflashops.metrics.log_models import LogSummary, estimate_num_drafts
from dflashops.metrics.logs import parse_log, parse_log_file
from dflashops.metrics.prometheus import parse_exposition

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
METRICS = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


def load(name: str) -> LogSummary:
    return parse_log_file(LOGS / name)


def test_real_cpu_log_windows() -> None:
    summary = load("real-vllm-0.32.0-cpu-ngram.log")
    assert summary.engine_version == "0.32.0"
    first = summary.throughput_windows[0]
    assert first.line == 84  # same numbering as grep -n, despite the progress bar's "\r"
    assert first.timestamp == "12-02 12:59:55"
    assert (first.pid, first.process, first.engine, first.source) == (
        8051,
        "APIServer",
        "000",
        "vllm",
    )
    assert first.prompt_throughput == 15.5 and first.generation_throughput == 50.5
    assert (first.running, first.waiting) == (0, 0)
    assert (first.kv_cache_device, first.kv_cache_usage_pct) == ("CPU", 0.0)
    assert first.prefix_cache_hit_rate_pct == 0.0
    assert len(summary.throughput_windows) == 4
    spec = summary.spec_decode_windows
    assert [w.line for w in spec] == [85, 92]
    assert spec[0].mean_acceptance_length == 4.36
    assert (spec[0].accepted_tokens, spec[0].drafted_tokens) == (188, 196)
    assert spec[0].accepted_throughput == 29.64 and spec[0].drafted_throughput == 30.9
    assert spec[0].per_position_acceptance == [1.0, 0.821, 0.804, 0.732]
    assert spec[0].acceptance_rate_pct == 95.9
    assert spec[0].engine == "000"  # from the stats line logged just before it
    # n-gram drafts vary in length, so drafts != drafted/k; the MAL pins them exactly here
    assert (spec[0].num_drafts, spec[0].num_drafts_exact) == (56, True)
    assert (spec[1].num_drafts, spec[1].num_drafts_exact) == (108, True)


def test_real_log_totals_match_the_real_scrape_counters() -> None:
    totals = load("real-vllm-0.32.0-cpu-ngram.log").spec_decode_totals
    assert totals is not None
    scrape = parse_exposition((METRICS / "real-vllm-0.32.0-cpu-ngram.txt").read_text())
    assert totals.accepted_tokens == scrape.total("vllm:spec_decode_num_accepted_tokens_total")
    assert totals.drafted_tokens == scrape.total("vllm:spec_decode_num_draft_tokens_total")
    assert totals.num_drafts == scrape.total("vllm:spec_decode_num_drafts_total") == 164
    assert totals.num_drafts_exact
    assert totals.acceptance_rate_pct == pytest.approx(100 * 592 / 600)
    assert totals.mean_acceptance_length == pytest.approx(1 + 592 / 164)
    per_pos = [
        s.value / 164 for s in scrape.samples("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    ]
    assert totals.per_position_acceptance == pytest.approx(per_pos, abs=1e-3)


def test_real_log_throughput_totals() -> None:
    totals = load("real-vllm-0.32.0-cpu-ngram.log").throughput_totals
    assert (totals.windows, totals.active_windows, totals.engines) == (4, 2, 1)
    assert totals.mean_generation_throughput == pytest.approx((50.5 + 102.4) / 2)
    assert totals.peak_generation_throughput == 102.4
    assert totals.mean_prompt_throughput == pytest.approx((15.5 + 8.0) / 2)


# Windows A (50 drafts, 126 accepted of 200) and B (80 drafts, 211 of 320) in every V1 version.
V1_FILES = [
    "synthesized-vllm-0.8.5.log",
    "synthesized-vllm-0.10.0.log",
    "synthesized-vllm-0.11.0.log",
]


@pytest.mark.parametrize("name", V1_FILES)
def test_synthesized_v1_versions_agree(name: str) -> None:
    summary = load(name)
    a, b = summary.spec_decode_windows
    assert (a.accepted_tokens, a.drafted_tokens, a.num_drafts, a.num_drafts_exact) == (
        126,
        200,
        50,
        True,
    )
    assert a.mean_acceptance_length == 3.52
    assert a.per_position_acceptance == [0.9, 0.72, 0.54, 0.36]
    assert a.acceptance_rate_pct == 63.0
    assert (b.accepted_tokens, b.drafted_tokens, b.num_drafts) == (211, 320, 80)
    totals = summary.spec_decode_totals
    assert totals is not None
    assert (totals.accepted_tokens, totals.drafted_tokens, totals.num_drafts) == (337, 520, 130)
    assert totals.mean_acceptance_length == pytest.approx(1 + 337 / 130)
    assert totals.per_position_acceptance == pytest.approx(
        [121 / 130, 96 / 130, 71 / 130, 49 / 130], abs=1e-3
    )
    first, second = summary.throughput_windows
    assert (first.generation_throughput, second.generation_throughput) == (85.3, 112.7)
    assert (second.running, second.waiting, second.prefix_cache_hit_rate_pct) == (2, 1, 50.0)


def test_version_specific_header_and_prefix() -> None:
    v085 = load("synthesized-vllm-0.8.5.log")
    assert v085.engine_version == "0.8.5"
    assert v085.throughput_windows[0].engine == "000"
    assert v085.throughput_windows[0].pid is None
    v010 = load("synthesized-vllm-0.10.0.log")
    assert v010.throughput_windows[0].engine is None  # 0.9.2-0.11.0: no "Engine" prefix
    assert v010.throughput_windows[0].pid == 4242
    v011 = load("synthesized-vllm-0.11.0.log")
    assert v011.spec_decode_windows[0].accepted_throughput == 12.6
    assert v011.spec_decode_windows[0].drafted_throughput == 20.0


def test_part_joined_stats_and_inexact_drafts() -> None:
    summary = load("synthesized-vllm-0.20.0.log")
    assert summary.engine_version == "0.20.0"
    busy = summary.throughput_windows[0]
    assert (busy.deferred, busy.preemptions, busy.kv_cache_device) == (1, 3, "GPU")
    assert (busy.kv_cache_usage_pct, busy.prefix_cache_hit_rate_pct) == (45.2, 61.3)
    assert len(summary.throughput_windows) == 3
    big = summary.spec_decode_windows[1]
    assert big.accepted_tokens == 12345 and big.mean_acceptance_length == 3.86
    # true value 4321: two printed decimals leave several integers possible
    assert big.num_drafts is not None and not big.num_drafts_exact
    assert abs(big.num_drafts - 4321) <= 6
    totals = summary.spec_decode_totals
    assert totals is not None and not totals.num_drafts_exact
    assert totals.acceptance_rate_pct == pytest.approx(100 * (126 + 12345) / (200 + 17284))


def test_dp_engines_and_kv_fetch() -> None:
    summary = load("synthesized-vllm-0.34.0-dp2.log")
    assert summary.engine_version == "0.34.0"
    e0, e1 = summary.throughput_windows
    assert (e0.engine, e1.engine) == ("000", "001")
    assert (e1.kv_fetch_waiting, e1.kv_fetch_in_progress, e1.kv_fetch_completed_waiting) == (
        2,
        0,
        0,
    )
    assert e0.prefix_cache_hit_rate_pct is None  # 0.32+: printed only with prefix-cache data
    assert [w.engine for w in summary.spec_decode_windows] == ["000", "001"]
    totals = summary.throughput_totals
    assert totals.engines == 2
    assert totals.mean_generation_throughput == pytest.approx(300.0)  # summed over engines
    spec = summary.spec_decode_totals
    assert spec is not None and spec.num_drafts == 130


def test_aggregated_engines_prefix() -> None:
    line = (
        "(APIServer pid=1) INFO 12-02 12:00:10 [loggers.py:301] 2 Engines Aggregated: "
        "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
        "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%"
    )  # synthesized from the 0.34.0 prefix format string
    (window,) = parse_log(line).throughput_windows
    assert window.engine == "2 aggregated"
    assert window.generation_throughput == 2.0


def test_v0_log_is_cumulative() -> None:
    summary = load("synthesized-vllm-0.6.6-v0.log")
    assert summary.engine_version == "0.6.6"
    first = summary.throughput_windows[0]
    assert first.source == "vllm-v0"
    assert (first.running, first.swapped, first.pending) == (2, 0, 1)
    assert (first.kv_cache_usage_pct, first.cpu_kv_cache_usage_pct) == (3.4, 0.0)
    assert (first.prefix_cache_hit_rate_pct, first.cpu_prefix_cache_hit_rate_pct) == (12.5, 0.0)
    a, _ = summary.spec_decode_windows
    assert a.cumulative and a.source == "vllm-v0"
    assert a.acceptance_rate_pct == pytest.approx(63.0)  # printed as a fraction
    assert (a.num_spec_tokens, a.accepted_tokens, a.drafted_tokens, a.emitted_tokens) == (
        4,
        126,
        200,
        176,
    )
    assert a.system_efficiency == 0.704
    assert (a.num_drafts, a.num_drafts_exact) == (50, True)
    assert a.mean_acceptance_length == pytest.approx(1 + 126 / 50)
    totals = summary.spec_decode_totals
    assert totals is not None and totals.cumulative
    # since engine start: the last line's counts, not a sum
    assert (totals.accepted_tokens, totals.drafted_tokens, totals.num_drafts) == (300, 480, 120)
    assert totals.mean_acceptance_length == pytest.approx(1 + 300 / 120)


def test_sglang_decode_lines() -> None:
    summary = load("synthesized-sglang-0.5.23.log")
    assert len(summary.throughput_windows) == 3  # the prefill line is not a window
    first = summary.throughput_windows[0]
    assert (first.source, first.timestamp, first.process) == ("sglang", "05-07 10:11:12", "TP0")
    assert first.generation_throughput == 150.23
    assert (first.running, first.waiting, first.used_tokens) == (1, 0, 1234)
    assert first.kv_cache_usage_pct == pytest.approx(1.0)
    spec = summary.spec_decode_windows
    assert [w.mean_acceptance_length for w in spec] == [6.07, 5.13, 4.0]
    assert spec[0].acceptance_rate_pct == pytest.approx(34.0)
    assert spec[2].acceptance_rate_pct is None  # the older line prints no accept rate
    assert spec[0].num_drafts is None
    totals = summary.spec_decode_totals
    assert totals is not None
    assert totals.accepted_tokens is None and totals.num_drafts is None
    assert totals.mean_acceptance_length == pytest.approx((6.07 + 5.13 + 4.0) / 3)


def test_noise_ansi_and_unrelated_lines() -> None:
    text = "\n".join(
        [
            "garbage line",
            "\x1b[32mINFO\x1b[0m 12-02 10:00:10 [loggers.py:111] Avg prompt throughput: 1.0 "
            "tokens/s, Avg generation throughput: 3.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs",
            "Dec 02 10:00:11 ct1 vllm[99]: (APIServer pid=99) INFO 12-02 10:00:11 [x.py:1] "
            "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 4.0 tokens/s",
            "(APIServer pid=99) INFO 12-02 10:00:12 [x.py:1] Route: /metrics, Methods: GET",
            "[2026-05-07 10:11:32] Decode batch. #running-req: 1, gen throughput (token/s): 5.00",
        ]
    )
    summary = parse_log(text)
    assert [w.generation_throughput for w in summary.throughput_windows] == [3.0, 4.0, 5.0]
    assert summary.throughput_windows[2].process is None  # SGLang without a TP/DP tag
    assert summary.spec_decode_windows == [] and summary.spec_decode_totals is None


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(ParseError, match="cannot read"):
        parse_log_file(tmp_path / "missing.log")


@pytest.mark.parametrize(
    ("accepted", "mal", "drafted", "per_position", "expected"),
    [
        (188, 4.36, 196, [1.0, 0.821, 0.804, 0.732], (56, True)),
        (126, 3.52, 200, None, (50, True)),
        (0, 1.0, 0, None, (0, True)),
        (0, 1.0, 40, None, None),
        (None, 3.0, 10, None, None),
        (10, float("nan"), 10, None, None),
    ],
)
def test_estimate_num_drafts(
    accepted: int | None,
    mal: float,
    drafted: int | None,
    per_position: list[float] | None,
    expected: tuple[int, bool] | None,
) -> None:
    assert estimate_num_drafts(accepted, mal, drafted=drafted, per_position=per_position) == (
        expected
    )


def test_estimate_num_drafts_bounds_hold_for_many_windows() -> None:
    # every (drafts, accepted) printed the way vLLM prints it must bracket the true drafts
    for drafts in range(1, 400, 7):
        for accepted in range(0, 4 * drafts + 1, max(1, drafts // 3)):
            mal = float(f"{1 + accepted / drafts:.2f}")
            got = estimate_num_drafts(accepted, mal, drafted=4 * drafts)
            if accepted == 0:
                assert got is None
                continue
            assert got is not None
            value, exact = got
            if exact:
                assert value == drafts, (drafts, accepted, mal)
            else:
                assert abs(value - drafts) <= max(2, drafts // 50), (drafts, accepted, got)


def test_optional_parts_of_the_part_joined_line() -> None:
    # synthesized from the 0.14+ part list (parts 5-10), CPU device word (0.30+)
    line = (
        "(APIServer pid=5) INFO 12-02 12:00:00 [loggers.py:1] Engine 000: "
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.5 tokens/s, "
        "Running: 3 reqs, Waiting: 4 reqs, Deferred: 2 reqs, "
        "KV fetch: 1 waiting to start, 2 in progress, 3 completed waiting, Preemptions: 7, "
        "CPU KV cache usage: 12.5%, Prefix cache hit rate: 40.0%, Corrupted: 1 reqs, "
        "External prefix cache hit rate: 5.5%, MM cache hit rate: 66.7%"
    )
    (w,) = parse_log(line).throughput_windows
    assert (w.running, w.waiting, w.deferred, w.preemptions, w.corrupted) == (3, 4, 2, 7, 1)
    assert (w.kv_fetch_waiting, w.kv_fetch_in_progress, w.kv_fetch_completed_waiting) == (1, 2, 3)
    assert (w.kv_cache_device, w.kv_cache_usage_pct) == ("CPU", 12.5)
    assert w.prefix_cache_hit_rate_pct == 40.0  # not the external one
    assert w.external_prefix_cache_hit_rate_pct == 5.5
    assert w.mm_cache_hit_rate_pct == 66.7


def test_nan_rate_when_nothing_was_drafted() -> None:
    # synthesized: vLLM logs "Draft acceptance rate" as accepted/drafted x 100, or nan
    line = (
        "INFO 12-02 12:00:00 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: 1.00, "
        "Accepted throughput: 0.00 tokens/s, Drafted throughput: 0.00 tokens/s, Accepted: 0 "
        "tokens, Drafted: 0 tokens, Per-position acceptance rate: , Avg Draft acceptance rate: nan%"
    )
    (w,) = parse_log(line).spec_decode_windows
    assert w.acceptance_rate_pct is None  # "nan%" means nothing was drafted
    assert w.per_position_acceptance == [] and (w.num_drafts, w.num_drafts_exact) == (0, True)
    totals = parse_log(line).spec_decode_totals
    assert totals is not None and totals.acceptance_rate_pct is None
