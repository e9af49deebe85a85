"""One benchmark against one server: for each concurrency level, warm up (not recorded), scrape
``/metrics``, send the level's requests, scrape again, and aggregate.

The scrape pair brackets only the measured requests, so the spec-decode delta of a level excludes
its warm-up; it still includes any other client's traffic in that window (the counters are
server-wide). Servers without ``/metrics`` (or without spec-decode counters) leave the spec fields
empty.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, Field

from dflashops.bench.client import (
    Endpoint,
    RequestOptions,
    ServerInfo,
    fetch_server_info,
    make_client,
    run_requests,
    scrape_metrics,
)
from dflashops.bench.models import (
    BenchReport,
    LevelResult,
    RequestRecord,
    ResolvedConfig,
    WorkloadInfo,
)
from dflashops.bench.stats import aggregate_level
from dflashops.bench.workload import Workload
from dflashops.errors import BenchmarkError
from dflashops.metrics.spec_decode import SpecDecodeCounters, SpecDecodeDelta, delta

if TYPE_CHECKING:
    import httpx


class BenchSettings(BaseModel):
    """What to run: workload, levels, sizes and sampling overrides."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: Workload
    concurrency: tuple[int, ...] = Field((1,), min_length=1)
    requests: int | None = Field(None, gt=0, description="per level; default max(prompts, c)")
    warmup_requests: int = Field(1, ge=0)
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0)
    ignore_eos: bool | None = None
    scrape_metrics: bool = True
    label: str | None = None

    def requests_for(self, concurrency: int) -> int:
        return self.requests or max(len(self.workload.prompts), concurrency)


class Progress(Protocol):
    """What a caller may show while a benchmark runs."""

    def start_level(self, concurrency: int, requests: int) -> None: ...

    def request_done(self, record: RequestRecord) -> None: ...


async def run_benchmark(
    endpoint: Endpoint,
    settings: BenchSettings,
    config: ResolvedConfig | None = None,
    *,
    progress: Progress | None = None,
) -> BenchReport:
    """Run every level in order and return the report (not saved)."""
    if any(c < 1 for c in settings.concurrency):
        raise BenchmarkError(f"concurrency levels must be >= 1, got {settings.concurrency}")
    workload = settings.workload
    async with make_client(endpoint, max(settings.concurrency)) as client:
        info = await fetch_server_info(client, endpoint)
        options = RequestOptions(
            max_tokens=settings.max_tokens or workload.max_tokens,
            temperature=(
                workload.temperature if settings.temperature is None else settings.temperature
            ),
            ignore_eos=workload.ignore_eos if settings.ignore_eos is None else settings.ignore_eos,
            max_model_len=info.max_model_len,
        )
        levels = [
            await _run_level(
                client,
                endpoint,
                info,
                settings=settings,
                options=options,
                concurrency=c,
                progress=progress,
            )
            for c in settings.concurrency
        ]
    return BenchReport(
        label=settings.label,
        config=_resolve(config or ResolvedConfig(), endpoint, info),
        workload=WorkloadInfo(
            name=workload.name,
            api=endpoint.api,
            num_prompts=len(workload.prompts),
            requests_per_level=settings.requests_for(max(settings.concurrency)),
            warmup_requests=settings.warmup_requests,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            ignore_eos=options.ignore_eos,
            source=workload.source,
        ),
        levels=levels,
    )


def run_benchmark_sync(
    endpoint: Endpoint,
    settings: BenchSettings,
    config: ResolvedConfig | None = None,
    *,
    progress: Progress | None = None,
) -> BenchReport:
    return asyncio.run(run_benchmark(endpoint, settings, config, progress=progress))


async def _run_level(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    info: ServerInfo,
    *,
    settings: BenchSettings,
    options: RequestOptions,
    concurrency: int,
    progress: Progress | None,
) -> LevelResult:
    workload = settings.workload
    if settings.warmup_requests:
        warmup, _ = await run_requests(
            client,
            endpoint,
            info.model,
            workload.requests(settings.warmup_requests),
            options,
            concurrency=min(concurrency, settings.warmup_requests),
        )
        if not any(r.success for r in warmup):
            raise BenchmarkError(
                f"{endpoint.root()}: the warm-up request failed: {warmup[0].error}",
                hint="check the server log (`dflashops logs NAME`)",
            )
    count = settings.requests_for(concurrency)
    if progress is not None:
        progress.start_level(concurrency, count)
    before = await _counters(client, endpoint, info, settings)
    records, duration = await run_requests(
        client,
        endpoint,
        info.model,
        workload.requests(count),
        options,
        concurrency=concurrency,
        on_done=progress.request_done if progress is not None else None,
    )
    after = await _counters(client, endpoint, info, settings)
    spec: SpecDecodeDelta | None = None
    if before is not None and after is not None:
        spec = delta(before, after)
    return aggregate_level(records, max_concurrency=concurrency, duration=duration, spec=spec)


async def _counters(
    client: httpx.AsyncClient, endpoint: Endpoint, info: ServerInfo, settings: BenchSettings
) -> SpecDecodeCounters | None:
    if not settings.scrape_metrics:
        return None
    text = await scrape_metrics(client, endpoint)
    if text is None:
        return None
    return SpecDecodeCounters.from_scrape(text, model_name=info.model)


def _resolve(config: ResolvedConfig, endpoint: Endpoint, info: ServerInfo) -> ResolvedConfig:
    """Fill what the server told us into what the caller did not already know."""
    known = config.model_dump()
    found = {
        "url": endpoint.root(),
        "served_model_name": info.model,
        "max_model_len": info.max_model_len,
        "engine_version": info.version,
    }
    return config.model_copy(
        update={k: v for k, v in found.items() if known.get(k) is None and v is not None}
    )
