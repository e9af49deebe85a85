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
