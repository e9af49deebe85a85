"""One concurrency level of a benchmark: warm up (not recorded), reset the prefix cache where the
server offers it, snapshot the server side, send the level's requests, let the server side
settle, snapshot again, and aggregate.

The server side of a level is the difference of two ``/metrics`` scrapes and, when a
``ServerLog`` is given, the log lines written between the two snapshots (see ``server_log``).
vLLM updates its counters just after it hands a request's last chunk to the client, so each
snapshot is taken only once two scrapes in a row agree ("settled"): the warm-up never leaks into
a level and a level's last tokens are never missed. With a log, the run also waits one stats
interval plus a margin before each snapshot so that the interval's lines are printed.

The counters are server-wide: traffic from other clients in the window is counted too. Servers
without ``/metrics`` (or without spec-decode counters) leave the spec fields empty.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from dflashops.bench.client import RequestOptions, run_requests
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import LevelResult, ServerLogCheck
from dflashops.bench.progress import Progress
from dflashops.bench.server_api import ServerInfo, reset_prefix_cache, scrape_metrics
from dflashops.bench.server_log import ServerLog, check_window
from dflashops.bench.settings import BenchSettings
from dflashops.bench.stats import aggregate_level
from dflashops.errors import BenchmarkError, RemoteError
from dflashops.metrics.spec_decode import SpecDecodeCounters, SpecDecodeDelta, delta

if TYPE_CHECKING:
    import httpx

DEFAULT_STATS_INTERVAL_S = 10.0  # vLLM's VLLM_LOG_STATS_INTERVAL default
SETTLE_POLL_S = 0.25


class _Snapshot(BaseModel):
    """The server side at one instant: counters, and the log's size."""

    model_config = ConfigDict(frozen=True)

    counters: SpecDecodeCounters | None
    log_offset: int | None


class LevelRun:
    """One benchmark's state across its levels: the client, the server's answers, and the notes
    and warnings for the reader."""

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
