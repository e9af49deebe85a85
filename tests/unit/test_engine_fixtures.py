"""Real vLLM servers of several releases, kept as fixtures (issue 35): each release's log and the
``/metrics`` scrape taken at its end, from the lab's tiny Qwen3 with n-gram speculation (k=4)
served by the CPU build (``benchmarks/engine_matrix.py``'s runtimes). What dflashops reads must
read the same on each: the log's version, its windows, its spec-decode totals against the
scrape's counters, and every metric name dflashops asks a server of that release for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dflashops.metrics.logs import parse_log_file
from dflashops.metrics.prometheus import parse_exposition

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LOGS = FIXTURES / "logs"
METRICS = FIXTURES / "metrics"
PAIRS = sorted(
    log.name.removesuffix(".log")
    for log in LOGS.glob("real-vllm-*-cpu-ngram.log")
    if (METRICS / log.with_suffix(".txt").name).exists()
)
# names dflashops falls back from on older servers or V0 (V1 renamed or dropped them)
LEGACY = frozenset({"vllm:gpu_cache_usage_perc", "vllm:spec_decode_num_emitted_tokens"})


def names_dflashops_reads() -> list[str]:
    """Every ``"vllm:…"`` name the package's sources ask a server for (a family prefix such as
    ``vllm:spec_decode_`` included), but the legacy ones."""
    package = Path(__file__).resolve().parents[2] / "dflashops"
    found = set()
    for source in package.rglob("*.py"):
        found.update(re.findall(r"[\"'](vllm:[a-z_]+)[\"']", source.read_text(encoding="utf-8")))
    return sorted(found - LEGACY)


def test_every_release_the_matrix_served_is_kept() -> None:
    assert [re.sub(r"real-vllm-(.+)-cpu-ngram", r"\1", name) for name in PAIRS] == [
        "0.22.0",
        "0.26.0",
        "0.32.0",
    ]


@pytest.mark.parametrize("name", PAIRS)
def test_log_totals_equal_the_scrape_of_the_same_server(name: str) -> None:
    release = re.sub(r"real-vllm-(.+)-cpu-ngram", r"\1", name)
    summary = parse_log_file(LOGS / f"{name}.log")
    assert summary.engine == "vllm" and summary.engine_version == release
    assert summary.throughput_windows and summary.spec_decode_windows
    totals = summary.spec_decode_totals
    assert totals is not None and totals.num_drafts_exact
    scrape = parse_exposition((METRICS / f"{name}.txt").read_text())
    drafts = scrape.total("vllm:spec_decode_num_drafts_total")
    assert drafts and totals.num_drafts == drafts
    assert totals.drafted_tokens == scrape.total("vllm:spec_decode_num_draft_tokens_total")
    assert totals.accepted_tokens == scrape.total("vllm:spec_decode_num_accepted_tokens_total")
    per_position = [
        sample.value / drafts
        for sample in scrape.samples("vllm:spec_decode_num_accepted_tokens_per_pos_total")
    ]
    assert len(per_position) == 4  # k=4
    assert totals.per_position_acceptance == pytest.approx(per_position, abs=1e-3)


@pytest.mark.parametrize("name", PAIRS)
def test_every_metric_dflashops_reads_is_served(name: str) -> None:
    served = {
        line.split("{")[0].split()[0]
        for line in (METRICS / f"{name}.txt").read_text().splitlines()
        if line.startswith("vllm:")
    }
    wanted = names_dflashops_reads()
    assert len(wanted) >= 10
    assert [n for n in wanted if not any(s.startswith(n) for s in served)] == []


def test_the_same_greedy_traffic_accepts_the_same_on_every_release() -> None:
    # identical models, prompts and greedy decoding: 0.22.0 to 0.26.0 drafted and accepted alike
    totals = [parse_log_file(LOGS / f"{name}.log").spec_decode_totals for name in PAIRS[:2]]
    assert [(t.num_drafts, t.drafted_tokens, t.accepted_tokens) for t in totals if t] == [
        (30, 120, 25),
        (30, 120, 25),
    ]
