"""parse-log's robustness: V0 lengths, SGLang rate formulas, cut lines, lines without headers.

The lines here are synthesized (each says from which real format or quote): they pin down one
behaviour each; the real excerpts are in test_parse_log_public.py.
"""

from __future__ import annotations

import pytest

from dflashops.metrics.logs import parse_log


def test_v0_length_is_emitted_per_step() -> None:
    # synthesized: accepted counts a token after a rejection, so the two formulas differ
    line = (
        "INFO 12-02 10:00:05 metrics.py:489] Speculative metrics: Draft acceptance rate: 0.500, "
        "System efficiency: 0.400, Number of speculative tokens: 4, Number of accepted tokens: "
        "20, Number of draft tokens: 40, Number of emitted tokens: 20."
    )
    (w,) = parse_log(line).spec_decode_windows
    assert (w.num_drafts, w.num_drafts_exact) == (10, True)
    assert w.mean_acceptance_length == pytest.approx(2.0)  # 20 emitted / 10 steps, not 1 + 20/10
    assert w.draft_acceptance_rate_pct == pytest.approx(100 * (20 - 10) / 40)
    assert w.acceptance_rate_pct == pytest.approx(50.0)  # as printed
    assert w.acceptance_rate_formula == "v0-accepted/drafted"


def test_sglang_other_logging_format_and_bonus_formula_from_numbers() -> None:
    # issue 19's quote of an SGLang line under a custom logging format, with its elided parts
    # (…) filled from the 0.5 decode line's format (synthesized around the quoted values)
    line = (
        "2025-12-04 20:35:53 INFO 151972 [scheduler_metrics_mixin.py:287] Decode batch. "
        "#running-req: 1, #token: 512, token usage: 0.01, accept len: 1.00, accept rate: 0.11, "
        "cuda graph: True, gen throughput (token/s): 40.12, #queue-req: 0, "
    )
    summary = parse_log(line)
    (decode,) = summary.throughput_windows
    assert (decode.source, decode.timestamp, decode.pid) == ("sglang", "12-04 20:35:53", 151972)
    (spec,) = summary.spec_decode_windows
    # nothing accepted yet 0.11 printed: only accept len / n fits (1/9 = 0.111), drafts-only
    # would print 0.00
    assert spec.acceptance_rate_formula == "sglang-with-bonus"
    assert spec.num_spec_tokens == 8 and spec.draft_acceptance_rate_pct == 0.0


SGLANG_ARGS = (
    "[2026-05-07 10:10:00] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', "
    "speculative_algorithm='DFLASH', speculative_num_steps=None, speculative_eagle_topk=None, "
    "speculative_num_draft_tokens=16, tp_size=1)"
)


def test_sglang_formula_from_server_args() -> None:
    # synthesized from PR #23530's formula (drafts only) with 16 draft tokens: (L - 1) / 15
    lines = [
        SGLANG_ARGS,
        "[2026-05-07 10:11:12 TP0] Decode batch, #running-req: 1, #token: 1234, token usage: "
        "0.01, accept len: 6.07, accept rate: 0.34, cuda graph: True, gen throughput (token/s): "
        "150.23, #queue-req: 0, ",
    ]
    summary = parse_log("\n".join(lines))
    (spec,) = summary.spec_decode_windows
    assert spec.acceptance_rate_formula == "sglang-drafts-only"
    assert spec.draft_acceptance_rate_pct == pytest.approx(34.0)
    assert spec.num_spec_tokens == 15
    assert any("server_args" in note for note in summary.notes)


def test_sglang_formula_unknown_when_both_fit() -> None:
    # one window whose numbers fit accept len / 4 (2.0 / 4) and (accept len - 1) / 2 alike
    line = (
        "[2026-01-02 10:00:00 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.00, "
        "accept len: 2.00, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 1.00, "
        "#queue-req: 0, "
    )  # synthesized
    summary = parse_log(line)
    (spec,) = summary.spec_decode_windows
    assert spec.acceptance_rate_formula == "unknown" and spec.draft_acceptance_rate_pct is None
    assert spec.acceptance_rate_pct == 50.0
    assert any("fit both or neither" in note for note in summary.notes)


def test_v1_spec_line_cut_mid_number_keeps_its_counts() -> None:
    # synthesized from the 0.10.1 format: the line stops inside the per-position list
    line = (
        "(APIServer pid=3) INFO 09-01 14:28:09 [metrics.py:87] SpecDecoding metrics: Draft "
        "acceptance rate: 15.5%, Mean acceptance length: 1.77, Accepted: 17 tokens, Drafted: 110 "
        "tokens, Per-position acceptance rate: 0.318, 0.182, 0.0"
    )
    (w,) = parse_log(line).spec_decode_windows
    assert w.truncated and w.per_position_acceptance == []
    assert (w.accepted_tokens, w.drafted_tokens, w.mean_acceptance_length) == (17, 110, 1.77)
    assert (w.num_drafts, w.num_drafts_exact) == (22, True)


def test_v1_spec_line_cut_at_a_comma_is_found_by_the_rates_sum() -> None:
    # synthesized (0.8.5 format, which ends with the list): two of five rates left, sum short
    line = (
        "INFO 12-02 10:00:10 [metrics.py:82] SpecDecoding metrics: Draft acceptance rate: 63.0%, "
        "Mean acceptance length: 3.52, Accepted: 126 tokens, Drafted: 200 tokens, Per-position "
        "acceptance rate: 0.900, 0.720,"
    )
    (w,) = parse_log(line).spec_decode_windows
    assert w.truncated and w.per_position_acceptance == []
    assert w.num_drafts == 50


def test_v0_line_cut_before_emitted() -> None:
    line = (
        "INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, "
        "System efficiency: 0.598, Number of speculative tokens: 3, Number of accepted tokens: "
        "8547, Number of draft tokens: 13311, Number of emitted tokens: 106"
    )  # the real 0.6.3 line of issue #9539, cut inside its last number (synthesized cut)
    (w,) = parse_log(line).spec_decode_windows
    assert w.truncated and w.emitted_tokens is None and w.mean_acceptance_length is None
    assert (w.num_drafts, w.drafted_tokens) == (4437, 13311)


def test_sglang_block_accept_len_is_not_the_accept_len() -> None:
    line = (
        "[2026-01-02 10:00:00 TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.00, "
        "block accept len: 3.00, accept len: 2.50, cuda graph: True, gen throughput (token/s): "
        "1.00, #queue-req: 0, "
    )  # synthesized from the 0.5.23 optional part
    (w,) = parse_log(line).spec_decode_windows
    assert w.mean_acceptance_length == 2.5


def test_headerless_stats_lines_and_python_default_logging() -> None:
    lines = [
        # issue 19's examples: lines pasted without the logger header (values synthesized)
        "Engine 000: Avg prompt throughput: 5.0 tokens/s, Avg generation throughput: 50.0 "
        "tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%",
        "SpecDecoding metrics: Mean acceptance length: 1.67, Accepted throughput: 2.00 tokens/s, "
        "Drafted throughput: 6.00 tokens/s, Accepted: 20 tokens, Drafted: 60 tokens, "
        "Per-position acceptance rate: 0.417, 0.167, 0.083, 0.000, Avg Draft acceptance rate: "
        "33.3%",
        "INFO:vllm.v1.metrics.loggers:Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg "
        "generation throughput: 7.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache "
        "usage: 2.0%",
    ]
    summary = parse_log("\n".join(lines))
    assert [w.engine for w in summary.throughput_windows] == ["000", "001"]
    (spec,) = summary.spec_decode_windows
    assert spec.engine == "000" and spec.mean_acceptance_length == 1.67
    assert (spec.num_drafts, spec.num_drafts_exact) == (30, True)
