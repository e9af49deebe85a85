"""Issue 33's three log shapes: a stats line wrapped over several lines is joined back, vLLM's
``Current speculative depth: N`` is the window's k, and SGLang's ``accept rate`` 1.00 at ``accept
len`` k + 1 gives k (both its formulas agree there).

The wrapped lines are real ones (``tests/fixtures/logs/public/``) cut the ways a terminal and a
reporter cut them; each must read exactly as the line it came from.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from dflashops.metrics import log_lines
from dflashops.metrics.log_lines import clean, locate
from dflashops.metrics.log_models import LogSummary
from dflashops.metrics.logs import parse_log, parse_log_file

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
PUBLIC = LOGS / "public"
WRAPPED = {
    "reconstructed-wrapped-lines.log",
    "vllm-v1-eagle3-k3-wrapped-by-reporter.log",
    "sglang-0.5.18-nextn-wrapped-indented.log",
}


def values(summary: LogSummary) -> list[dict[str, object]]:
    """Every window's values, without the line number (a joined line has its first line's)."""
    windows = [*summary.throughput_windows, *summary.spec_decode_windows]
    return [window.model_dump(exclude={"line"}) for window in windows]


def stats_lines(*names: str) -> list[str]:
    """The published lines of these excerpts that hold a stats message."""
    found = []
    for name in names:
        for raw in (PUBLIC / name).read_text(encoding="utf-8").splitlines():
            line = clean(raw)
            if locate(line) is not None:
                found.append(line)
    return found


def hard_wrap(line: str, width: int) -> str:
    """A terminal's wrap: cut every ``width`` characters, mid-word and mid-number."""
    return "\n".join(line[start : start + width] for start in range(0, len(line), width))


def reporter_wrap(line: str, width: int) -> str:
    """A reporter's wrap: at spaces (dropped) and after hyphens."""
    return "\n".join(textwrap.wrap(line, width))


# one line of each format family: V1 0.10.2 stats and spec, 0.10.1 spec ending in its rates,
# 0.8.5-style rate-first spec, a V0 spec and stats line, a headerless DFlash k=15 line, SGLang
# 0.5.3 with accept rate, Ray and rank tags with an iteration number
LINES = stats_lines(
    "vllm-0.10.2-v1-k8.log",
    "vllm-0.10.1-v1-dp3-k5.log",
    "vllm-0.6.3-v0-draft-k3.log",
    "vllm-0.7-v0-stats-no-spec.log",
    "vllm-v1-dflash-k15-no-prefix.log",
    "sglang-0.5.3-eagle3-accept-rate-with-bonus.log",
    "sglang-0.5-ray-and-dp-tags-test-fixture.log",
)


@pytest.mark.parametrize("width", [40, 57, 80, 100, 120, 132, 160])
@pytest.mark.parametrize("wrap", [hard_wrap, reporter_wrap])
def test_a_wrapped_line_reads_as_the_line_it_came_from(
    wrap: Callable[[str, int], str], width: int
) -> None:
    for line in LINES:
        located = locate(line)
        assert located is not None
        header = len(line) - len(located.message)
        if width <= header:
            continue  # a cut inside the header itself: the header's fields are lost
        expected = values(parse_log(line))
        wrapped = parse_log(wrap(line, width))
        assert values(wrapped) == expected, f"width {width}: {line[:60]}…"
        # numbered by the first line (V0's prefix cache line alone makes no window)
        assert {w.line for w in [*wrapped.throughput_windows, *wrapped.spec_decode_windows]} <= {1}


def test_the_reporters_wrap_of_issue_33() -> None:
    # the issue's example, as published: the first line alone reads only the acceptance length
    (alone,) = parse_log("SpecDecoding metrics: Mean acceptance length: 2.77,").spec_decode_windows
    assert alone.truncated and alone.accepted_tokens is None
    summary = parse_log_file(PUBLIC / "vllm-v1-eagle3-k3-wrapped-by-reporter.log")
    (window,) = summary.spec_decode_windows
    one_line = parse_log(
        "SpecDecoding metrics: Mean acceptance length: 2.77, Accepted: 626 tokens, Drafted: "
        "1062 tokens, Per-position acceptance rate: 0.802, 0.551, 0.415, Avg Draft acceptance "
        "rate: 58.9%"
    )
    assert values(summary) == values(one_line)
    assert (window.line, window.num_drafts, window.num_drafts_exact) == (1, 354, True)


def test_the_reconstructed_wraps_read_as_the_published_lines() -> None:
    summary = parse_log_file(LOGS / "reconstructed-wrapped-lines.log")
    vllm = parse_log_file(PUBLIC / "vllm-0.10.2-v1-k8.log")
    sglang = parse_log_file(PUBLIC / "sglang-0.5.3-eagle3-accept-rate-with-bonus.log")
    throughput, spec = summary.throughput_windows, summary.spec_decode_windows
    # a terminal's 80 columns: the stats line cut inside "Avg prompt throughput", the spec line
    # inside "Mean", "throughput", "Per-position" and "Draft"
    assert [w.line for w in throughput[:1]] == [2] and [w.line for w in spec[:1]] == [5]
    assert throughput[0].model_dump(exclude={"line"}) == vllm.throughput_windows[0].model_dump(
        exclude={"line"}
    )
    assert spec[0].model_dump(exclude={"line"}) == vllm.spec_decode_windows[0].model_dump(
        exclude={"line"}
    )
    # a reporter's wrap after a comma, indented; a terminal's cut inside "178.86"
    published = {w.mean_acceptance_length: w for w in sglang.spec_decode_windows}
    for window in spec[1:3]:
        assert window.model_dump(exclude={"line"}) == published[
            window.mean_acceptance_length
        ].model_dump(exclude={"line"})
    assert [w.generation_throughput for w in throughput[1:3]] == [0.39, 178.86]


def test_a_line_that_starts_a_record_of_its_own_is_never_joined() -> None:
    summary = parse_log_file(LOGS / "reconstructed-wrapped-lines.log")
    by_line = {w.line: w for w in summary.spec_decode_windows}
    # line 15 carries a header: the spec line cut before it stays cut (no "Drafted")
    cut = by_line[14]
    assert cut.truncated and cut.accepted_tokens == 9321 and cut.drafted_tokens is None
    assert 15 not in by_line and 15 not in {w.line for w in summary.throughput_windows}
    # line 17 is a Decode batch line of its own (no header): read alone, line 16 stays cut
    assert by_line[16].truncated and by_line[16].acceptance_rate_pct is None
    assert by_line[17].mean_acceptance_length == 2.05 and not by_line[17].truncated
    assert "lines cut short, read up to where they stop: 14, 16, 16" in summary.notes


@pytest.mark.parametrize(
    "follower",
    [
        "INFO 12-02 06:39:56 [metrics.py:96] Accepted: 626 tokens, Drafted: 1062 tokens,",
        "(APIServer pid=7) Accepted: 626 tokens, Drafted: 1062 tokens,",
        "12:00:01 Accepted: 626 tokens, Drafted: 1062 tokens,",
        "WARNING Accepted: 626 tokens, Drafted: 1062 tokens,",
        "",  # a blank line ends the paragraph
    ],
)
def test_a_continuation_that_looks_like_a_header_is_not_joined(follower: str) -> None:
    text = "\n".join(
        ["SpecDecoding metrics: Mean acceptance length: 2.77,", follower, "Accepted: 1 tokens,"]
    )
    (window,) = parse_log(text).spec_decode_windows
    assert window.truncated and window.accepted_tokens is None


def test_a_complete_line_takes_no_following_text() -> None:
    line = stats_lines("vllm-0.10.2-v1-k8.log")[1]
    traceback = [
        "Traceback (most recent call last):",
        '  File "server.py", line 3, in <module>',
        "    Drafted: 5 tokens, Per-position acceptance rate: 0.100, Accepted: 1 tokens,",
        "55",
    ]
    summary = parse_log("\n".join([line, *traceback]))
    assert values(summary) == values(parse_log(line))


@pytest.mark.parametrize(
    "path",
    sorted(
        path for path in [*PUBLIC.glob("*.log"), *LOGS.glob("*.log")] if path.name not in WRAPPED
    ),
    ids=lambda path: path.name,
)
def test_unwrapped_logs_parse_exactly_as_without_joining(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    joined = parse_log_file(path)
    monkeypatch.setattr(log_lines, "MAX_CONTINUATIONS", 0)
    assert parse_log_file(path) == joined


def test_current_speculative_depth_is_the_windows_k() -> None:
    summary = parse_log_file(LOGS / "synthesized-vllm-fork-current-speculative-depth.log")
    windows = summary.spec_decode_windows
    assert [w.num_spec_tokens for w in windows] == [3, 5, 2]
    assert [len(w.per_position_acceptance) for w in windows] == [5, 5, 5]  # the configured max
    # drafts: 120 drafted / 3 and 100 / 5, pinned by the MAL; nothing accepted: 30 / 2 (not / 5)
    assert [(w.num_drafts, w.num_drafts_exact) for w in windows] == [
        (40, True),
        (20, True),
        (15, False),
    ]
    assert not any(w.truncated for w in windows)
    assert [w.engine for w in windows] == ["000", "000", "000"]


def test_a_spec_line_without_a_depth_keeps_k_from_its_rates() -> None:
    line = stats_lines("vllm-0.10.2-v1-k8.log")[1]
    (window,) = parse_log(line).spec_decode_windows
    assert window.num_spec_tokens == 8


def decode_line(accept_len: float, accept_rate: float) -> str:
    return (
        "[2026-06-14 15:28:57] Decode batch, #running-req: 1, #token: 100, token usage: 0.01, "
        f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, cuda graph: True, "
        "gen throughput (token/s): 290.40, #queue-req: 0, "
    )


@pytest.mark.parametrize("k", [1, 2, 3, 7, 15, 63])
def test_sglang_accept_rate_one_at_accept_len_k_plus_one_gives_k(k: int) -> None:
    summary = parse_log(decode_line(k + 1, 1.0))
    (window,) = summary.spec_decode_windows
    assert window.acceptance_rate_formula == "sglang-either"
    assert (window.num_spec_tokens, window.draft_acceptance_rate_pct) == (k, 100.0)
    assert not any("fit both or neither" in note for note in summary.notes)
    assert any(f"k = {k}," in note for note in summary.notes)


def test_sglang_either_also_from_server_args() -> None:
    args = (
        "[2026-06-14 15:00:00] server_args=ServerArgs(speculative_algorithm='EAGLE', "
        "speculative_num_steps=3, speculative_num_draft_tokens=4)"
    )
    (window,) = parse_log(f"{args}\n{decode_line(4.0, 1.0)}").spec_decode_windows
    assert (window.acceptance_rate_formula, window.num_spec_tokens) == ("sglang-either", 3)


def test_sglang_accept_rate_one_is_not_k_when_the_args_disagree() -> None:
    # 8 draft tokens per step would print 4/8 or 3/7, not 1.00: no formula fits, nothing guessed
    args = "[2026-06-14 15:00:00] server_args=ServerArgs(speculative_num_draft_tokens=8)"
    (window,) = parse_log(f"{args}\n{decode_line(4.0, 1.0)}").spec_decode_windows
    assert window.acceptance_rate_formula == "unknown" and window.num_spec_tokens is None


def test_sglang_a_window_that_tells_the_formula_apart_still_decides() -> None:
    # 2.17 / 4 = 0.54 fits only accept len / n: the 1.00 window is read with that formula
    summary = parse_log("\n".join([decode_line(2.17, 0.54), decode_line(4.0, 1.0)]))
    assert {w.acceptance_rate_formula for w in summary.spec_decode_windows} == {"sglang-with-bonus"}
    assert [w.draft_acceptance_rate_pct for w in summary.spec_decode_windows] == pytest.approx(
        [39.0, 100.0]
    )
