"""One benchmark against one server: for each concurrency level, warm up (not recorded), reset
the prefix cache where the server offers it, snapshot the server side, send the level's requests,
let the server side settle, snapshot again, and aggregate.

The server side of a level is the difference of two ``/metrics`` scrapes and, when a
``ServerLog`` is given, the log lines written between the two snapshots (see ``server_log``).
vLLM updates its counters just after it hands a request's last chunk to the client, so each
snapshot is taken only once two scrapes in a row agree ("settled"): the warm-up never leaks into
a level and a level's last tokens are never missed. With a log, the runner also waits one stats
interval plus a margin before each snapshot so that the interval's lines are printed.

The counters are server-wide: traffic from other clients in the window is counted too. Servers
without ``/metrics`` (or without spec-decode counters) leave the spec fields empty.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from dflashops.bench.client import (
    Endpoint,
    RequestOptions,
    ServerInfo,
    fetch_server_info,
    make_client,
    max_tokens_caps,
    reset_prefix_cache,
    run_requests,
    scrape_metrics,
)
from dflashops.bench.models import (
    BenchReport,
    LevelResult,
    RequestRecord,
    ResolvedConfig,
    ServerLogCheck,
    WorkloadInfo,
)
from dflashops.bench.server_log import ServerLog, check_window
from dflashops.bench.stats import aggregate_level
from dflashops.bench.workload import Workload, load_workload
from dflashops.errors import BenchmarkError, RemoteError
from dflashops.metrics.spec_decode import SpecDecodeCounters, SpecDecodeDelta, delta

if TYPE_CHECKING:
    import httpx

    from dflashops.playbook.models import Playbook

DEFAULT_STATS_INTERVAL_S = 10.0  # vLLM's VLLM_LOG_STATS_INTERVAL default
SETTLE_POLL_S = 0.25


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
    thinking: bool | None = Field(None, description="chat_template_kwargs.enable_thinking")
    reset_prefix_cache: bool = Field(True, description="before each level, where offered")
    scrape_metrics: bool = True
    settle_timeout_s: float = Field(10.0, gt=0, description="bound on waiting for counters")
    label: str | None = None

    def requests_for(self, concurrency: int) -> int:
        return self.requests or max(len(self.workload.prompts), concurrency)

    @classmethod
    def from_playbook(
        cls,
        playbook: Playbook | None,
        *,
        workload: str | None = None,
        concurrency: Sequence[int] | None = None,
        requests: int | None = None,
        warmup_requests: int | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        ignore_eos: bool | None = None,
        thinking: bool | None = None,
        label: str | None = None,
    ) -> BenchSettings:
        """The playbook's ``bench`` section, each given value winning over it.

        Without a playbook the defaults are the built-in ones: the smoke workload (the
        reference request), concurrency 1, one warm-up, the workload's max_tokens (2000) and
        temperature (0), no ignore_eos.
        """
        bench = playbook.bench if playbook is not None else None

        def first(given: Any, from_book: Any) -> Any:
            return given if given is not None else from_book

        return cls(
            workload=load_workload(first(workload, bench.workload if bench else "smoke")),
            concurrency=tuple(first(concurrency, bench.concurrency if bench else (1,))),
            requests=first(requests, bench.requests if bench else None),
            warmup_requests=first(warmup_requests, bench.warmup_requests if bench else 1),
            max_tokens=first(max_tokens, bench.max_tokens if bench else None),
            temperature=first(temperature, bench.temperature if bench else None),
            ignore_eos=first(ignore_eos, bench.ignore_eos if bench else None),
            thinking=first(thinking, bench.thinking if bench else None),
            label=label,
        )


@runtime_checkable
class Progress(Protocol):
    """What a caller may show while a benchmark runs."""

    def phase(self, message: str) -> None:
        """What the run waits for now (warm-up, settling, reading the server log)."""

    def start_level(self, concurrency: int, requests: int) -> None: ...

    def request_done(self, record: RequestRecord) -> None: ...


Say = Callable[[str], None]
"""The project's plain progress callback (``say(message)``), accepted wherever ``Progress`` is."""


class QuietProgress:
    """A ``Progress`` that shows nothing."""

    def phase(self, message: str) -> None:
        pass

    def start_level(self, concurrency: int, requests: int) -> None:
        pass

    def request_done(self, record: RequestRecord) -> None:
        pass


class SayProgress:
    """A ``Progress`` that turns every event into one ``say(message)`` line."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.level = 0
        self.total = 0
        self.done = 0
        self.tokens = 0
        self.started = 0.0

    def phase(self, message: str) -> None:
        self.say(message)

    def start_level(self, concurrency: int, requests: int) -> None:
        self.level, self.total, self.done, self.tokens = concurrency, requests, 0, 0
        self.started = time.perf_counter()
        self.say(f"concurrency {concurrency}: 0/{requests} requests")

    def request_done(self, record: RequestRecord) -> None:
        self.done += 1
        self.tokens += record.output_tokens or 0
        elapsed = time.perf_counter() - self.started
        rate = f", {self.tokens / elapsed:.1f} tok/s" if elapsed > 0 else ""
        self.say(f"concurrency {self.level}: {self.done}/{self.total} requests{rate}")


def as_progress(progress: Progress | Say | None) -> Progress:
    """A ``Progress`` for any of the accepted forms (None shows nothing)."""
    if progress is None:
        return QuietProgress()
    if isinstance(progress, Progress):
        return progress
    return SayProgress(progress)


class _Snapshot(BaseModel):
    """The server side at one instant: counters, and the log's size."""

    model_config = ConfigDict(frozen=True)

    counters: SpecDecodeCounters | None
    log_offset: int | None


class _Run:
    """One benchmark's state: the client, the server's answers, and what to tell the reader."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        endpoint: Endpoint,
        info: ServerInfo,
        settings: BenchSettings,
        options: RequestOptions,
        *,
        progress: Progress,
        server_log: ServerLog | None,
        stats_interval_s: float,
    ) -> None:
        self.client = client
        self.endpoint = endpoint
        self.info = info
        self.settings = settings
        self.options = options
        self.progress = progress
        self.server_log = server_log
        self.stats_interval_s = stats_interval_s
        self.notes: list[str] = []
        self.warnings: list[str] = []
        self.reset_unsupported = False

    def note(self, message: str) -> None:
        if message not in self.notes:
            self.notes.append(message)

    async def level(self, concurrency: int) -> LevelResult:
        settings, workload = self.settings, self.settings.workload
        warnings: list[str] = []
        if settings.warmup_requests:
            self.progress.phase(f"concurrency {concurrency}: warm-up")
            warmup, _ = await run_requests(
                self.client,
                self.endpoint,
                self.info.model,
                workload.requests(settings.warmup_requests),
                self.options,
                concurrency=min(concurrency, settings.warmup_requests),
            )
            if not any(r.success for r in warmup):
                raise BenchmarkError(
                    f"{self.endpoint.root()}: the warm-up request failed: {warmup[0].error}",
                    hint="check the server log (`dflashops logs NAME`)",
                )
        reset = await self._reset_prefix_cache()
        before = await self._snapshot(concurrency, "before", warnings, log_offset=True)
        count = settings.requests_for(concurrency)
        self.progress.start_level(concurrency, count)
        cpu_before = time.process_time()
        records, duration = await run_requests(
            self.client,
            self.endpoint,
            self.info.model,
            workload.requests(count),
            self.options,
            concurrency=concurrency,
            on_done=self.progress.request_done,
        )
        client_cpu_s = time.process_time() - cpu_before
        after = await self._snapshot(concurrency, "after", warnings, log_offset=False)
        spec: SpecDecodeDelta | None = None
        if before.counters is not None and after.counters is not None:
            spec = delta(before.counters, after.counters)
        result = aggregate_level(records, max_concurrency=concurrency, duration=duration, spec=spec)
        log_check = None
        if self.server_log is not None and before.log_offset is not None:
            log_check = await self._read_log(before.log_offset, spec, concurrency, warnings)
        generated = result.server_generation_tokens
        if generated is not None and generated != result.total_output_tokens:
            warnings.append(
                f"concurrency {concurrency}: the server generated {generated} tokens in the "
                f"level, the responses' usage adds up to {result.total_output_tokens} (another "
                "client, or failed requests)"
            )
        return result.model_copy(
            update={
                "server_log": log_check,
                "prefix_cache_reset": reset,
                "warnings": warnings,
                "client_cpu_s": round(client_cpu_s, 4),
            }
        )

    async def _reset_prefix_cache(self) -> bool | None:
        if not self.settings.reset_prefix_cache or self.reset_unsupported:
            return None
        done = await reset_prefix_cache(self.client, self.endpoint)
        if done is None:
            self.reset_unsupported = True
            self.note(
                "prefix cache not reset between levels: the server has no /reset_prefix_cache "
                "(vLLM serves it with VLLM_SERVER_DEV_MODE=1)"
            )
        elif not done:
            self.note("prefix cache reset failed on the server; levels may reuse cached prefixes")
        return done

    async def _snapshot(
        self, concurrency: int, when: str, warnings: list[str], *, log_offset: bool
    ) -> _Snapshot:
        """Counters once settled, after the log's stats lines are out (and the log's size)."""
        if self.server_log is not None:
            wait = self.stats_interval_s + max(0.5, 0.25 * self.stats_interval_s)
            self.progress.phase(
                f"concurrency {concurrency}: waiting {wait:.1f} s for the server's stats lines"
            )
            await asyncio.sleep(wait)
        counters = await self._settled_counters(concurrency, when, warnings)
        offset = None
        if self.server_log is not None and log_offset:
            try:
                offset = await asyncio.to_thread(self.server_log.size)
            except RemoteError as exc:
                self.note(f"server log not read: {exc.one_line()}")
                self.server_log = None
        return _Snapshot(counters=counters, log_offset=offset)

    async def _settled_counters(
        self, concurrency: int, when: str, warnings: list[str]
    ) -> SpecDecodeCounters | None:
        """Scrape until two scrapes ``SETTLE_POLL_S`` apart agree (bounded)."""
        if not self.settings.scrape_metrics:
            return None
        self.progress.phase(f"concurrency {concurrency}: reading /metrics")
        last = await self._counters()
        if last is None:
            self.note("no /metrics on the server: the spec-decode fields are empty")
            return None
        deadline = time.monotonic() + self.settings.settle_timeout_s
        while True:
            await asyncio.sleep(SETTLE_POLL_S)
            current = await self._counters()
            if current is None or current == last:
                return last
            last = current
            if time.monotonic() > deadline:
                warnings.append(
                    f"concurrency {concurrency}: the server's counters kept moving "
                    f"{self.settings.settle_timeout_s:.0f} s {when} the level (another client?)"
                )
                return last

    async def _counters(self) -> SpecDecodeCounters | None:
        text = await scrape_metrics(self.client, self.endpoint)
        if text is None:
            return None
        return SpecDecodeCounters.from_scrape(text, model_name=self.info.model)

    async def _read_log(
        self,
        offset: int,
        spec: SpecDecodeDelta | None,
        concurrency: int,
        warnings: list[str],
    ) -> ServerLogCheck | None:
        assert self.server_log is not None
        self.progress.phase(f"concurrency {concurrency}: reading the server log")
        try:
            read = await asyncio.to_thread(self.server_log.read_from, offset)
        except RemoteError as exc:
            warnings.append(f"concurrency {concurrency}: server log not read: {exc.one_line()}")
            return None
        check, found = check_window(read, spec, concurrency=concurrency)
        warnings.extend(found)
        return check


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
        run = _Run(
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
        levels = [await run.level(c) for c in settings.concurrency]
    final_config, config_warnings = _resolve(config or ResolvedConfig(), endpoint, info)
    if run.server_log is not None:
        final_config = final_config.model_copy(update={"server_log": run.server_log.path})
    return BenchReport(
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
        notes=run.notes,
        warnings=[*config_warnings, *run.warnings],
    )


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
    engine's own version wins over the deployment's, with a warning when they differ."""
    known = config.model_dump()
    found = {
        "url": endpoint.root(),
        "served_model_name": info.model,
        "max_model_len": info.max_model_len,
        "engine_version": info.version,
    }
    update = {k: v for k, v in found.items() if known.get(k) is None and v is not None}
    warnings = []
    claimed = config.engine_version
    if claimed and info.version and _release(claimed) != _release(info.version):
        warnings.append(
            f"the server reports engine version {info.version}, the deployment says {claimed}"
        )
        update["engine_version"] = info.version
    sources = dict(config.resolved_from)
    for key in update:
        sources[key] = "server"
    return config.model_copy(update={**update, "resolved_from": sources}), warnings


def _release(version: str) -> str:
    """``0.32.0+cpu`` → ``0.32.0`` (a local build tag is not another release)."""
    return version.split("+", 1)[0].strip()
