"""One benchmark against one server: every concurrency level in order (``level``), then the
report, with what the server told us about itself filled into the config; or, when the server
stops answering, ``BenchInterrupted`` with the report of what was measured.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from dflashops.bench.client import RequestOptions, max_tokens_caps
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.level import DEFAULT_STATS_INTERVAL_S, LevelRun
from dflashops.bench.models import (
    BenchReport,
    LevelResult,
    ResolvedConfig,
    RunStopped,
    WorkloadInfo,
)
from dflashops.bench.progress import Progress, as_progress
from dflashops.bench.server_api import ServerInfo, fetch_server_info, make_client
from dflashops.bench.server_log import ServerLog
from dflashops.bench.settings import BenchSettings
from dflashops.bench.sglang_info import ServedSpeculation
from dflashops.bench.stopped import BenchInterrupted, LevelStopped
from dflashops.errors import BenchmarkError
from dflashops.progress import Say


async def run_benchmark(
    endpoint: Endpoint,
    settings: BenchSettings,
    config: ResolvedConfig | None = None,
    *,
    progress: Progress | Say | None = None,
    server_log: ServerLog | None = None,
    stats_interval_s: float | None = None,
    notes: Sequence[str] = (),
) -> BenchReport:
    """Run every level in order and return the report (not saved).

    When the server stops answering, ``BenchInterrupted`` carries the report of what was measured
    (``stopped`` says where): a caller that wants a measurement fails, ``bench`` saves it.

    ``server_log`` (read over SSH by ``bench NAME``) adds the log cross-check; a caller without
    one says why in ``notes``. ``stats_interval_s`` is the server's ``VLLM_LOG_STATS_INTERVAL``
    (default 10 s).
    """
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
            thinking=settings.thinking if endpoint.api == "chat" else None,
        )
        run = LevelRun(
            client,
            endpoint,
            info,
            settings,
            options,
            progress=as_progress(progress),
            server_log=server_log,
            stats_interval_s=stats_interval_s or DEFAULT_STATS_INTERVAL_S,
        )
        for message in notes:
            run.note(message)
        if settings.thinking is not None and endpoint.api != "chat":
            run.note("thinking mode not sent: it is a chat-template option (use --api chat)")
        run.warnings.extend(max_tokens_caps(workload.prompts, options))
        levels, stopped = await _levels(run, settings.concurrency)
    final_config, config_warnings = _resolve(config or ResolvedConfig(), endpoint, info)
    if run.server_log is not None:
        final_config = final_config.model_copy(update={"server_log": run.server_log.path})
    report = BenchReport(
        label=settings.label,
        config=final_config,
        workload=WorkloadInfo(
            name=workload.name,
            api=endpoint.api,
            num_prompts=len(workload.prompts),
            requests_per_level=settings.requests_for(max(settings.concurrency)),
            warmup_requests=settings.warmup_requests,
            max_tokens=options.max_tokens,
            temperature=options.temperature,
            ignore_eos=options.ignore_eos,
            thinking=options.thinking,
            source=workload.source,
        ),
        levels=levels,
        stopped=stopped,
        notes=run.notes,
        warnings=[*config_warnings, *run.warnings],
    )
    if stopped is not None:
        raise BenchInterrupted(report)
    return report


async def _levels(
    run: LevelRun, planned: Sequence[int]
) -> tuple[list[LevelResult], RunStopped | None]:
    """Every level in order, until the server stops answering: then the levels measured so far
    (the one in progress incomplete, when its requests had begun) and where it stopped."""
    levels: list[LevelResult] = []
    for index, concurrency in enumerate(planned):
        try:
            levels.append(await run.level(concurrency))
        except LevelStopped as stop:
            if stop.level is not None:
                levels.append(stop.level)
            return levels, stop.record(planned[index + 1 :])
    return levels, None


def run_benchmark_sync(
    endpoint: Endpoint,
    settings: BenchSettings,
    config: ResolvedConfig | None = None,
    *,
    progress: Progress | Say | None = None,
    server_log: ServerLog | None = None,
    stats_interval_s: float | None = None,
    notes: Sequence[str] = (),
) -> BenchReport:
    return asyncio.run(
        run_benchmark(
            endpoint,
            settings,
            config,
            progress=progress,
            server_log=server_log,
            stats_interval_s=stats_interval_s,
            notes=notes,
        )
    )


def _resolve(
    config: ResolvedConfig, endpoint: Endpoint, info: ServerInfo
) -> tuple[ResolvedConfig, list[str]]:
    """Fill what the server told us into what the caller did not already know; the running
    engine's own version, and the speculation SGLang reports, win over what the deployment or
    the command line claimed, with a warning when they differ (a pushed config that did not
    arrive)."""
    known = config.model_dump()
    served = info.speculation
    found = {
        "url": endpoint.root(),
        "served_model_name": info.model,
        "max_model_len": info.max_model_len,
        "engine": info.engine,
        "engine_version": info.version,
        "method": served.method if served else None,
        "num_speculative_tokens": served.k if served else None,
    }
    update: dict[str, object] = {
        k: v for k, v in found.items() if known.get(k) is None and v is not None
    }
    warnings = []
    claimed = config.engine_version
    if claimed and info.version and _release(claimed) != _release(info.version):
        warnings.append(
            f"the server reports engine version {info.version}, the deployment says {claimed}"
        )
        update["engine_version"] = info.version
    if served is not None and config.method is not None and _differs(config, served):
        said = ServedSpeculation(config.method, config.num_speculative_tokens).describe()
        warnings.append(
            f"the server reports it speculates with {served.describe()}, the run was told "
            f"{said}: the report records the server's"
        )
        update |= {"method": served.method, "num_speculative_tokens": served.k}
    sources = dict(config.resolved_from)
    for key in update:
        sources[key] = "server"
    return config.model_copy(update={**update, "resolved_from": sources}), warnings


def _differs(config: ResolvedConfig, served: ServedSpeculation) -> bool:
    if config.method != served.method:
        return True
    told = config.num_speculative_tokens
    return served.method != "none" and None not in (told, served.k) and told != served.k


def _release(version: str) -> str:
    """``0.32.0+cpu`` → ``0.32.0`` (a local build tag is not another release)."""
    return version.split("+", 1)[0].strip()
