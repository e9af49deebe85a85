"""One concurrency level of a benchmark: warm up (not recorded), reset the prefix cache where the
server offers it, snapshot the server side, send the level's requests, let the server side
settle, snapshot again, and aggregate.

The server side of a level is the difference of two ``/metrics`` scrapes and, when a
``ServerLog`` is given, the log lines written between the two snapshots (see ``server_log``).
vLLM updates its counters just after it hands a request's last chunk to the client, so each
snapshot is taken only once two scrapes in a row agree ("settled"): the warm-up never leaks into
a level and a level's last tokens are never missed. With a log, the run also waits one stats
interval plus a margin before each snapshot so that the interval's lines are printed.

When the server stops answering (a request's connection refused, reset or cut and then
``/v1/models`` unanswered, or a scrape refused), no more requests are sent and the level raises
``LevelStopped`` with what it measured: its requests' numbers without the counters.

The counters are server-wide: traffic from other clients in the window is counted too. Servers
without ``/metrics`` (or without spec-decode counters) leave the spec fields empty.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from dflashops.bench.client import RequestOptions, run_requests
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import LevelResult, RequestRecord, ServerLogCheck
from dflashops.bench.progress import Progress
from dflashops.bench.server_api import (
    ServerInfo,
    reset_prefix_cache,
    scrape_metrics,
    unanswered,
)
from dflashops.bench.server_log import ServerLog, check_window
from dflashops.bench.settings import BenchSettings
from dflashops.bench.stats import aggregate_level, queued_requests_warning
from dflashops.bench.stopped import LevelStopped, Phase, ServerStopped, WarmupRefused
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


@dataclass(frozen=True)
class _Sent:
    """A level's measured requests, and what else it keeps (reset, CPU time, warnings)."""

    concurrency: int
    count: int
    records: list[RequestRecord]
    duration: float
    kept: dict[str, Any]

    def stopped(self, error: str, phase: Phase) -> LevelStopped:
        """The level cut short: its requests' own numbers stand, marked incomplete; the counters
        over it are lost with the server."""
        level = aggregate_level(
            self.records, max_concurrency=self.concurrency, duration=self.duration
        )
        update = {**self.kept, "incomplete": True, "not_sent": self.count - len(self.records)}
        return LevelStopped(
            error, concurrency=self.concurrency, phase=phase, level=level.model_copy(update=update)
        )


class _Watch:
    """Whether the server stopped answering, asked after each lost connection, one at a time: a
    reset can be one connection's bad luck, a server that no longer answers ``/v1/models`` is
    gone (and then no more requests are sent)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.error: str | None = None
        self._asking = asyncio.Lock()

    async def stopped(self) -> bool:
        async with self._asking:
            if self.error is None:
                self.error = await unanswered(self.endpoint)
        return self.error is not None


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
        """The level's result; ``LevelStopped`` when the server stops answering, with what the
        level measured once its requests began."""
        warnings: list[str] = []
        try:
            await self._warm_up(concurrency)
            reset = await self._reset_prefix_cache()
            before = await self._snapshot(concurrency, "before", warnings, log_offset=True)
        except ServerStopped as exc:
            raise LevelStopped(
                exc.error, concurrency=concurrency, phase="before", level=None
            ) from exc
        count = self.settings.requests_for(concurrency)
        self.progress.start_level(concurrency, count)
        watch = _Watch(self.endpoint)
        cpu_before = time.process_time()
        records, duration = await run_requests(
            self.client,
            self.endpoint,
            self.info.model,
            self.settings.workload.requests(count),
            self.options,
            concurrency=concurrency,
            on_done=self.progress.request_done,
            lost_connection=watch.stopped,
        )
        client_cpu_s = time.process_time() - cpu_before
        kept = {
            "prefix_cache_reset": reset,
            "client_cpu_s": round(client_cpu_s, 4),
            "warnings": warnings,
        }
        sent = _Sent(concurrency, count, records, duration, kept)
        if watch.error is not None:
            raise sent.stopped(watch.error, "during")
        try:
            after = await self._snapshot(concurrency, "after", warnings, log_offset=False)
        except ServerStopped as exc:
            raise sent.stopped(exc.error, "after") from exc
        spec: SpecDecodeDelta | None = None
        if before.counters is not None and after.counters is not None:
            spec = delta(before.counters, after.counters)
        result = aggregate_level(records, max_concurrency=concurrency, duration=duration, spec=spec)
        if queued := queued_requests_warning(result):
            warnings.append(queued)
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
        return result.model_copy(update={"server_log": log_check, **kept})

    async def _warm_up(self, concurrency: int) -> None:
        """The warm-up requests (not recorded); ``ServerStopped`` when the server is gone."""
        settings = self.settings
        if not settings.warmup_requests:
            return
        self.progress.phase(f"concurrency {concurrency}: warm-up")
        watch = _Watch(self.endpoint)
        warmup, _ = await run_requests(
            self.client,
            self.endpoint,
            self.info.model,
            settings.workload.requests(settings.warmup_requests),
            self.options,
            concurrency=min(concurrency, settings.warmup_requests),
            lost_connection=watch.stopped,
        )
        if watch.error is not None:
            raise ServerStopped(watch.error)
        if not any(r.success for r in warmup):
            refused = refused_by_server(warmup[0].error)
            raise (WarmupRefused if refused else BenchmarkError)(
                f"{self.endpoint.root()}: the warm-up request failed: {warmup[0].error}",
                hint=warmup_hint(self.endpoint, warmup[0].error),
            )

    async def _reset_prefix_cache(self) -> bool | None:
        if not self.settings.reset_prefix_cache or self.reset_unsupported:
            return None
        done = await reset_prefix_cache(self.client, self.endpoint)
        if done is None:
            self.reset_unsupported = True
            self.note(
                "prefix cache not reset between levels: the server has no /reset_prefix_cache "
                "(vLLM serves it with VLLM_SERVER_DEV_MODE=1) and no /flush_cache (SGLang)"
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


def warmup_hint(endpoint: Endpoint, error: str | None) -> str:
    """What to do about a failed warm-up: a model with no chat template cannot take the chat API
    (vLLM: "default chat template is no longer allowed"; SGLang says "chat template" too), which
    the completions API avoids; anything else is in the server log."""
    if endpoint.api == "chat" and error and "chat template" in error.lower():
        return (
            "the model's tokenizer has no chat template: bench the completions API "
            "(`--api completions`, or `bench: {api: completions}` in the playbook)"
        )
    return "check the server log (`dflashops logs NAME`)"


def refused_by_server(error: str | None) -> bool:
    """A client error the server will give every such request again (the client writes
    ``HTTP <status>: <body>``); 408 and 429 are about timing, not the request."""
    match = re.match(r"HTTP (4\d\d)\b", error or "")
    return match is not None and match.group(1) not in ("408", "429")
