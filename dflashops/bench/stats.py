"""Per-request timings → one ``LevelResult`` (the arithmetic ``vllm bench serve`` does).

Percentiles interpolate linearly between order statistics (numpy's default, which vLLM uses);
``std`` is the population standard deviation (numpy's default ``ddof=0``). A statistic over no
values is None rather than vLLM's 0, so "not measured" never reads as "zero milliseconds".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dflashops.bench.models import LevelResult, RequestRecord
from dflashops.metrics.spec_decode import SpecDecodeDelta


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0–100), linear interpolation; ``values`` must not be empty."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= p <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {p}")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def describe(values: Sequence[float]) -> dict[str, float | None]:
    """mean, median, std, p90 and p99 of ``values`` (all None when empty)."""
    if not values:
        return dict.fromkeys(("mean", "median", "std", "p90", "p99"))
    mean = math.fsum(values) / len(values)
    return {
        "mean": mean,
        "median": percentile(values, 50),
        "std": math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values)),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
    }


def tpot_ms(
    ttft_ms: float | None, e2el_ms: float | None, output_tokens: int | None
) -> float | None:
    """(latency − TTFT) / (tokens − 1): the decode time per token after the first."""
    if ttft_ms is None or e2el_ms is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2el_ms - ttft_ms) / (output_tokens - 1)


def aggregate_level(
    records: Sequence[RequestRecord],
    *,
    max_concurrency: int,
    duration: float,
    spec: SpecDecodeDelta | None = None,
) -> LevelResult:
    """Aggregate one level's measured requests; ``duration`` is the level's wall time in s."""
    ok = [r for r in records if r.success]
    series: dict[str, list[float]] = {
        "ttft": [r.ttft_ms for r in ok if r.ttft_ms is not None],
        "tpot": [r.tpot_ms for r in ok if r.tpot_ms is not None],
        "itl": [gap for r in ok for gap in r.itl_ms],
        "e2el": [r.e2el_ms for r in ok if r.e2el_ms is not None],
    }
    total_in = sum(r.prompt_tokens or 0 for r in ok)
    total_out = sum(r.output_tokens or 0 for r in ok)
    chunks = sum(r.chunks for r in ok)
    fields: dict[str, Any] = {
        "max_concurrency": max_concurrency,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "duration": duration,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
        "mean_tokens_per_chunk": total_out / chunks if chunks else None,
        "errors": sorted({r.error for r in records if r.error}),
        "requests": list(records),
    }
    for metric, values in series.items():
        for statistic, value in describe(values).items():
            fields[f"{statistic}_{metric}_ms"] = value
    if spec is not None:
        fields["server_generation_tokens"] = spec.generation_tokens
        if spec.spec_decode:
            fields.update(spec.vllm_bench_keys())
            if not fields["spec_decode_per_position_acceptance_rates"]:
                fields["spec_decode_per_position_acceptance_rates"] = None
    return LevelResult.model_validate(fields)


#: a first token this late, next to the level's median request, means the request was queued
QUEUED_SHARE_OF_E2EL = 0.8
QUEUED_TIMES_MEDIAN_TTFT = 10.0
#: ... and warned about only when the waits add up to this share of the level's wall time
QUEUED_SHARE_OF_LEVEL = 0.05


def queued_requests_warning(level: LevelResult) -> str | None:
    """Requests that waited about a whole request for their first token: the server held them
    for a free slot (its running-request cap at or below the level's concurrency). With requests
    of one length the running ones start and end together, so one request admitted a step late
    waits a whole wave; on the H100 that was 1 of 96 requests and 14 % of a c=16 level's tok/s
    (benchmarks/RESULTS.md, SGLang at --max-running-requests 16). Levels that ran a wave
    cleanly and levels that waited one then disagree for a reason no client can see."""
    ok = [r for r in level.requests if r.success and r.ttft_ms is not None and r.e2el_ms]
    if len(ok) < 2 or level.median_ttft_ms is None or level.median_e2el_ms is None:
        return None
    limit = max(
        QUEUED_SHARE_OF_E2EL * level.median_e2el_ms,
        QUEUED_TIMES_MEDIAN_TTFT * level.median_ttft_ms,
    )
    late = [r.ttft_ms for r in ok if r.ttft_ms is not None and r.ttft_ms > limit]
    waited_s = sum(ttft - level.median_ttft_ms for ttft in late) / 1000
    # a stall too short to move the level's tok/s is noise (a busy client machine), not a queue
    if not late or waited_s < QUEUED_SHARE_OF_LEVEL * level.duration:
        return None
    return (
        f"concurrency {level.max_concurrency}: {len(late)} of {len(ok)} requests waited up to "
        f"{max(late) / 1000:.2f} s for their first token (median {level.median_ttft_ms:.0f} ms, "
        f"a whole request takes {level.median_e2el_ms / 1000:.2f} s; {waited_s:.1f} s of the "
        f"level's {level.duration:.1f} s): the server queued them for a free slot, and the "
        "level's tok/s carries the wait (a running-request cap at the concurrency, such as "
        "--max-num-seqs or --max-running-requests)"
    )
