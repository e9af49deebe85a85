"""Bench reports for tests: one factory, with the workload a small smoke run has."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dflashops.bench.models import BenchReport, LevelResult, ResolvedConfig, WorkloadInfo

SMOKE_WORKLOAD: dict[str, Any] = {
    "name": "smoke",
    "num_prompts": 1,
    "requests_per_level": 3,
    "warmup_requests": 1,
    "max_tokens": 2000,
    "temperature": 0.0,
    "ignore_eos": False,
}


SMOKE_LEVEL: dict[str, Any] = {
    "max_concurrency": 1,
    "completed": 3,
    "failed": 0,
    "duration": 3.0,
    "total_input_tokens": 30,
    "total_output_tokens": 384,
    "request_throughput": 1.0,
    "output_throughput": 100.0,
    "total_token_throughput": 110.0,
}


def level_result(**fields: Any) -> LevelResult:
    """One concurrency level of three requests; ``fields`` replace or add ``LevelResult`` keys."""
    return LevelResult(**{**SMOKE_LEVEL, **fields})


def bench_report(
    levels: Iterable[LevelResult], *, workload: dict[str, Any] | None = None, **config: Any
) -> BenchReport:
    """A report of ``levels``; ``config`` fills ``ResolvedConfig``, ``workload`` replaces keys of
    the smoke workload."""
    return BenchReport(
        config=ResolvedConfig(**config),
        workload=WorkloadInfo(**{**SMOKE_WORKLOAD, **(workload or {})}),
        levels=list(levels),
    )
