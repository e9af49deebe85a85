"""A real SGLang 0.5.16 server on this machine's CPU, kept as fixtures (issue 37).

The lab's tiny Qwen3 served by SGLang 0.5.16 (torch 2.13.0+cpu, the CPU ``sgl-kernel`` built
from the SGLang sources of that release's time) with the command line dflashops
renders (``benchmarks/sglang_cpu_capture.py``): no speculation, n-gram (k=4, a verify window of
5) and EAGLE-3 (k=4, a random drafter: nothing is accepted). Each run kept its log, a
``/metrics`` scrape before and after four native ``/generate`` requests of 64 tokens (the
scrapes' window holds only those requests) and their ``meta_info`` with ``/get_server_info``'s
keys of interest (``tests/fixtures/sglang/real-0.5.16-cpu-*-generate.json``). What dflashops
reads must read the same as the server said: the decode lines, the metric names and labels,
and the spec-decode counters against the requests' own numbers.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dflashops.metrics.logs import parse_log_file
from dflashops.metrics.prometheus import Scrape, parse_exposition
from dflashops.metrics.spec_decode import SpecDecodeCounters, delta
from dflashops.metrics.spec_sglang import (
    GENERATION_TOKENS,
    MODEL_LABEL,
    NUM_DRAFT_TOKENS,
    NUM_STEPS,
    REQUESTS,
    VERIFY_CALLS,
    is_sglang,
)
from dflashops.watch.reading import read_scrape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
VERSION = "0.5.16"
METHODS = ("none", "ngram", "eagle3")
SPECULATING = ("ngram", "eagle3")
SERVED = "tiny"
DECODE = re.compile(
    r"Decode batch, #running-req: (?P<running>\d+), #token: (?P<tokens>\d+), "
    r"token usage: (?P<usage>[\d.]+), (?:accept len: (?P<len>[\d.]+), "
    r"accept rate: (?P<rate>[\d.]+), )?cpu graph: False, "
    r"gen throughput \(token/s\): (?P<gen>[\d.]+), #queue-req: (?P<queue>\d+)$"
)
# the labels SGLang 0.5.16 puts on its series: counters per model, gauges per scheduler rank
COUNTER_LABELS = {"engine_type": "unified", MODEL_LABEL: SERVED}
GAUGE_LABELS = {**COUNTER_LABELS, "moe_ep_rank": "0", "pp_rank": "0", "tp_rank": "0"}
COUNTERS = (GENERATION_TOKENS, "sglang:prompt_tokens_total", REQUESTS)
SPEC_GAUGES = (
    "sglang:spec_accept_length",
    "sglang:spec_accept_rate",
    NUM_STEPS,
    NUM_DRAFT_TOKENS,
)


def log(method: str) -> Path:
    # the run without speculation is kept beside the JSON: every log under logs/ has
    # spec-decode windows (tests/unit/test_metrics_cli.py asks)
    folder = "sglang" if method == "none" else "logs"
    return FIXTURES / folder / f"real-sglang-{VERSION}-cpu-{method}.log"


def scrape(method: str, when: str) -> Scrape:
    path = FIXTURES / "metrics" / f"real-sglang-{VERSION}-cpu-{method}-{when}.txt"
    return parse_exposition(path.read_text(encoding="utf-8"))


def captured(method: str) -> dict[str, Any]:
    path = FIXTURES / "sglang" / f"real-{VERSION}-cpu-{method}-generate.json"
    return dict(json.loads(path.read_text(encoding="utf-8")))


def generated(method: str) -> list[dict[str, Any]]:
    return [r["meta_info"] for r in captured(method)["requests"] if r["path"] == "/generate"]


def decode_lines(method: str) -> list[re.Match[str]]:
    found = []
    for line in log(method).read_text(encoding="utf-8").splitlines():
        if "Decode batch" in line:
            match = DECODE.search(line)
            assert match, line
            found.append(match)
    return found


@pytest.mark.parametrize("method", METHODS)
def test_every_decode_line_is_one_window_with_the_line_s_numbers(method: str) -> None:
    lines = decode_lines(method)
    summary = parse_log_file(log(method))

    assert summary.engine == "sglang"
    assert summary.engine_version is None  # SGLang's log prints no version of its own
    assert len(lines) >= 40
    windows = summary.throughput_windows
    assert [w.generation_throughput for w in windows] == [float(m["gen"]) for m in lines]
    assert [w.running for w in windows] == [int(m["running"]) for m in lines]
    assert [w.waiting for w in windows] == [int(m["queue"]) for m in lines]
    assert [w.used_tokens for w in windows] == [int(m["tokens"]) for m in lines]
    assert [w.kv_cache_usage_pct for w in windows] == pytest.approx(
        [100 * float(m["usage"]) for m in lines]
    )
    assert not any(w.truncated for w in windows)
    mean = sum(float(m["gen"]) for m in lines) / len(lines)
    assert summary.throughput_totals.mean_generation_throughput == pytest.approx(mean)
    if method == "none":
        assert summary.spec_decode_windows == [] and summary.spec_decode_totals is None
        assert all(m["len"] is None for m in lines)


@pytest.mark.parametrize("method", SPECULATING)
def test_accept_len_and_rate_windows_are_the_line_s_with_the_formula_from_server_args(
    method: str,
) -> None:
    lines = decode_lines(method)
    summary = parse_log_file(log(method))
    spec = summary.spec_decode_windows

    assert [w.mean_acceptance_length for w in spec] == [float(m["len"]) for m in lines]
    assert [w.acceptance_rate_pct for w in spec] == pytest.approx(
        [100 * float(m["rate"]) for m in lines]
    )
    # 0.5.16 prints accepted drafts / proposed drafts (PR #23530): (len - 1) / (n - 1), n = 5
    assert {w.acceptance_rate_formula for w in spec} == {"sglang-drafts-only"}
    assert {w.num_spec_tokens for w in spec} == {4}
    for window, line in zip(spec, lines, strict=True):
        assert (float(line["len"]) - 1) / 4 == pytest.approx(float(line["rate"]), abs=0.0051)
        # under this formula the printed rate is already drafts kept / drafts proposed: kept
        # as printed (two decimals), not recomputed from accept len (1.50 -> 12.5 %, printed 0.12)
        assert window.draft_acceptance_rate_pct == pytest.approx(100 * float(line["rate"]))
    totals = summary.spec_decode_totals
    assert totals is not None and totals.windows == len(lines)
    assert totals.mean_acceptance_length == pytest.approx(
        sum(float(m["len"]) for m in lines) / len(lines)
    )
    assert any("5 draft tokens per step" in note for note in summary.notes)


def test_the_ngram_log_accepts_what_the_server_reported() -> None:
    summary = parse_log_file(log("ngram"))
    totals = summary.spec_decode_totals
    assert totals is not None
    assert (totals.windows, round(totals.mean_acceptance_length or 0, 4)) == (45, 1.4191)
    assert max(w.mean_acceptance_length or 0 for w in summary.spec_decode_windows) == 2.38
    # the scheduler's own average (accepted tokens / verify forwards since start) is close to
    # the mean of the windows' lengths, not equal: windows differ in their forwards
    state = captured("ngram")["internal_states[0]"]
    assert state["avg_spec_accept_length"] == pytest.approx(totals.mean_acceptance_length, abs=0.01)


def test_the_eagle3_log_accepts_nothing_from_a_random_drafter() -> None:
    totals = parse_log_file(log("eagle3")).spec_decode_totals
    assert totals is not None and totals.mean_acceptance_length == 1.0
    assert totals.draft_acceptance_rate_pct == 0.0


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("when", ["before", "after"])
def test_the_families_dflashops_reads_are_served_with_these_labels(method: str, when: str) -> None:
    served = scrape(method, when)
    assert is_sglang(served)
    for name in COUNTERS:
        assert [dict(s.labels) for s in served.samples(name)] == [COUNTER_LABELS], name
    for name in SPEC_GAUGES:  # present without speculation too, at 0
        assert [dict(s.labels) for s in served.samples(name)] == [GAUGE_LABELS], name
    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
        assert [dict(s.labels) for s in served.samples(name)] == [GAUGE_LABELS], name
    verify = [dict(s.labels) for s in served.samples(VERIFY_CALLS)]
    # bumped only by a request that verified: absent without speculation
    assert verify == ([] if method == "none" else [COUNTER_LABELS])


def test_every_sglang_name_the_package_asks_for_is_served() -> None:
    package = Path(__file__).resolve().parents[2] / "dflashops"
    wanted = set()
    for source in package.rglob("*.py"):
        wanted.update(re.findall(r"[\"'](sglang:[a-z_]+)[\"']", source.read_text(encoding="utf-8")))
    served = scrape("ngram", "after").sample_names()
    assert len(wanted) >= 6
    assert sorted(n for n in wanted if not any(s.startswith(n) for s in served)) == []


@pytest.mark.parametrize("method", SPECULATING)
def test_the_gauges_are_the_last_decode_line_s(method: str) -> None:
    last = decode_lines(method)[-1]
    after = scrape(method, "after")
    assert round(after.value("sglang:spec_accept_length") or 0, 2) == pytest.approx(
        float(last["len"]), abs=0.006
    )
    assert round(after.value("sglang:spec_accept_rate") or 0, 2) == pytest.approx(
        float(last["rate"]), abs=0.006
    )
    assert after.value(NUM_DRAFT_TOKENS) == 5.0
    # n-gram has no draft steps (SGLang sets 0); EAGLE-3's chain has k = 4
    assert after.value(NUM_STEPS) == (0.0 if method == "ngram" else 4.0)


@pytest.mark.parametrize("method", SPECULATING)
def test_the_scrapes_window_is_the_generate_requests_meta_info(method: str) -> None:
    """The window between the scrapes holds only the four /generate requests (the OpenAI
    requests ran before the first scrape). SGLang bumps its counters once per finished request
    by that request's completion tokens and verify forwards (``spec_verify_ct``), so the
    window's deltas are the sums of the requests' ``meta_info``, and Δ tokens / Δ verify calls
    is SGLang's own ``spec_accept_length`` (completion / verify forwards, the prefill's token
    counted) over those requests. Per request, completion = 1 (the prefill's token) + verify
    forwards + accepted drafts kept: dflashops reads accepted = Δ tokens - Δ verify - Δ
    requests (vLLM's terms)."""
    metas = generated(method)
    before, after = scrape(method, "before"), scrape(method, "after")
    tokens = sum(m["completion_tokens"] for m in metas)
    verify = sum(m["spec_verify_ct"] for m in metas)

    assert len(metas) == 4 and tokens == 4 * 64
    assert (after.total(GENERATION_TOKENS) or 0) - (before.total(GENERATION_TOKENS) or 0) == tokens
    assert (after.total(VERIFY_CALLS) or 0) - (before.total(VERIFY_CALLS) or 0) == verify
    assert (after.total(REQUESTS) or 0) - (before.total(REQUESTS) or 0) == len(metas)
    for meta in metas:
        assert meta["spec_accept_length"] == pytest.approx(
            meta["completion_tokens"] / meta["spec_verify_ct"]
        )
        assert meta["spec_num_proposed_drafts"] == 4 * meta["spec_verify_ct"]
        # the histogram: verify forwards by how many drafts each accepted
        histogram = meta["spec_correct_drafts_histogram"]
        assert sum(histogram) == meta["spec_verify_ct"]
        assert sum(i * n for i, n in enumerate(histogram)) == meta["spec_num_correct_drafts"]
        # SGLang counts every accepted draft, also those past max_new_tokens that the answer
        # drops: kept = completion - 1 - verify is at most its count
        kept = meta["completion_tokens"] - 1 - meta["spec_verify_ct"]
        assert 0 <= kept <= meta["spec_num_correct_drafts"]
    # Δ tokens / Δ verify forwards = SGLang's per-request lengths weighted by their forwards
    assert tokens / verify == pytest.approx(
        sum(m["spec_accept_length"] * m["spec_verify_ct"] for m in metas) / verify
    )

    window = delta(
        SpecDecodeCounters.from_scrape(before, model_name=SERVED),
        SpecDecodeCounters.from_scrape(after, model_name=SERVED),
    )
    kept = tokens - verify - len(metas)
    assert window.spec_decode
    assert (window.num_drafts, window.num_accepted_tokens) == (verify, kept)
    assert window.num_draft_tokens == sum(m["spec_num_proposed_drafts"] for m in metas)
    assert window.generation_tokens == tokens
    assert window.acceptance_length == pytest.approx(1 + kept / verify)
    # vLLM's length leaves the prefill's token out: below SGLang's by requests / verify forwards
    assert (window.acceptance_length or 0) + len(metas) / verify == pytest.approx(tokens / verify)


def test_the_ngram_window_in_numbers() -> None:
    metas = generated("ngram")
    assert [m["spec_verify_ct"] for m in metas] == [45, 46, 36, 44]
    assert [m["spec_num_correct_drafts"] for m in metas] == [18, 17, 31, 19]
    # the third request accepted 31 drafts but 64 = 1 + 36 + 27: its last verify forward
    # accepted 4 drafts past max_new_tokens, which the answer dropped
    assert [64 - 1 - m["spec_verify_ct"] for m in metas] == [18, 17, 27, 19]
    window = delta(
        SpecDecodeCounters.from_scrape(scrape("ngram", "before")),
        SpecDecodeCounters.from_scrape(scrape("ngram", "after")),
    )
    assert (window.num_drafts, window.num_accepted_tokens, window.num_draft_tokens) == (
        171,
        81,
        684,
    )
    assert window.acceptance_length == pytest.approx(1 + 81 / 171)  # 1.474; SGLang's 256/171
    assert window.acceptance_rate == pytest.approx(81 / 684)


def test_without_speculation_the_counters_say_so() -> None:
    window = delta(
        SpecDecodeCounters.from_scrape(scrape("none", "before")),
        SpecDecodeCounters.from_scrape(scrape("none", "after")),
    )
    assert not window.spec_decode
    assert window.generation_tokens == 4 * 64
    assert all("spec_verify_ct" not in m for m in generated("none"))


@pytest.mark.parametrize("method", METHODS)
def test_watch_reads_the_real_scrape(method: str) -> None:
    text = (FIXTURES / "metrics" / f"real-sglang-{VERSION}-cpu-{method}-after.txt").read_text()
    reading = read_scrape(text, at_s=0.0, time=datetime.now(UTC))
    assert (reading.generation_tokens, reading.running, reading.waiting) == (
        scrape(method, "after").total(GENERATION_TOKENS),
        0,
        0,
    )


@pytest.mark.parametrize("method", METHODS)
def test_the_server_ran_what_dflashops_rendered(method: str) -> None:
    kept = captured(method)
    info = kept["server_info"]
    assert (info["version"], info["device"], info["dtype"]) == (VERSION, "cpu", "bfloat16")
    assert info["attention_backend"] == "intel_amx" and info["enable_metrics"] is True
    expected = {"none": None, "ngram": "NGRAM", "eagle3": "EAGLE3"}[method]
    assert info["speculative_algorithm"] == expected
    if method != "none":
        assert info["speculative_num_draft_tokens"] == 5
    assert kept["readiness"]["phase"] == "ready"
    # dflashops' readiness and the server's own health endpoints all answered
    answered = {
        r["path"]: r["status"] for r in kept["requests"] if r["path"].startswith(("/h", "/v1/m"))
    }
    assert answered == {"/health": 200, "/health_generate": 200, "/v1/models": 200}


def test_the_h200_dflash_log_knows_its_window_from_server_args() -> None:
    """SGLang 0.5.15's own log on the H200 (DFLASH k=4, dummy weights, so nothing accepted:
    every window fits every window size n). Its server_args say speculative_num_draft_tokens=5
    beside speculative_num_steps=1 (DFLASH's); the window is the first."""
    summary = parse_log_file(FIXTURES / "logs" / "real-sglang-0.5.15-h200-dflash.log")
    spec = summary.spec_decode_windows
    assert summary.engine == "sglang" and len(spec) == len(summary.throughput_windows) == 80
    assert {w.mean_acceptance_length for w in spec} == {1.0}
    assert {w.acceptance_rate_formula for w in spec} == {"sglang-drafts-only"}
    assert {w.num_spec_tokens for w in spec} == {4}
    assert any("5 draft tokens per step" in note for note in summary.notes)
    gen = [w.generation_throughput for w in summary.throughput_windows]
    assert gen[:3] == [
        7.61,
        144.59,
        155.44,
    ]  # the log's first decode lines, c=1 warm-up then 6.4 ms
