"""A level where the server queued requests for a free slot says so (bench's level warnings)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dflashops.bench.models import BenchReport, RequestRecord
from dflashops.bench.stats import aggregate_level, queued_requests_warning

REPO = Path(__file__).resolve().parents[2]
GPU_COMPARE = REPO / "benchmarks/results/gpu-h100-sglang-20261205/compare/compare.json"


def request(number: int, ttft_ms: float, e2el_ms: float) -> RequestRecord:
    return RequestRecord(
        prompt_id=f"p{number}",
        success=True,
        start_s=0.0,
        ttft_ms=ttft_ms,
        e2el_ms=e2el_ms,
        output_tokens=256,
        chunks=256,
    )


def wave_level(late: list[tuple[float, float]], *, ttft_ms: float = 44.0) -> list[RequestRecord]:
    """96 requests of 256 tokens at c=16 as SGLang served them on the H100 (TTFT ≈ 44 ms, a
    request ≈ 2.39 s), ``late`` being (TTFT, E2EL) of requests that waited."""
    normal = [request(n, ttft_ms, 2390.0) for n in range(96 - len(late))]
    return normal + [request(100 + n, t, e) for n, (t, e) in enumerate(late)]


def test_a_request_that_waited_a_whole_wave_is_named() -> None:
    # round 0 of the H100 agreement run: one request's TTFT 2,397 ms, the level 16.71 s, not 14.3
    level = aggregate_level(wave_level([(2397.0, 4742.0)]), max_concurrency=16, duration=16.71)
    warning = queued_requests_warning(level)
    assert warning is not None
    assert warning.startswith("concurrency 16: 1 of 96 requests waited up to 2.40 s")
    assert "(median 44 ms, a whole request takes 2.39 s; 2.4 s of the level's 16.7 s)" in warning
    assert "--max-running-requests" in warning


@pytest.mark.parametrize(
    ("late", "ttft_ms", "duration"),
    [
        ([], 44.0, 14.3),  # a clean level: six waves
        ([(300.0, 2650.0)], 44.0, 14.3),  # a slow prefill, not a wait for a slot
        ([(1100.0, 3400.0)], 44.0, 14.3),  # under 0.8 of a request
        ([(1900.0, 4300.0)], 1500.0, 14.3),  # long prompts: every first token is late
        ([(2397.0, 4742.0)], 44.0, 60.0),  # a whole wave, but under 5 % of a 60 s level
    ],
)
def test_a_level_without_a_queued_request_says_nothing(
    late: list[tuple[float, float]], ttft_ms: float, duration: float
) -> None:
    records = wave_level(late, ttft_ms=ttft_ms)
    level = aggregate_level(records, max_concurrency=16, duration=duration)
    assert queued_requests_warning(level) is None


def test_the_gpu_compare_levels_queued_nothing() -> None:
    # vLLM 0.26 and SGLang 0.5.15 at c = 1 and 4 under a cap of 16: nothing waited for a slot
    report = BenchReport.load(GPU_COMPARE)
    assert report.compare is not None
    levels = [
        level
        for cell in report.compare["levels"].values()
        for level in BenchReport.model_validate(
            {**report.model_dump(mode="json"), "levels": cell["levels"]}
        ).levels
    ]
    assert len(levels) == 8 and all(level.requests for level in levels)
    assert [queued_requests_warning(level) for level in levels] == [None] * 8
