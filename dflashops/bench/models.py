"""The saved benchmark result: ``BenchReport`` (versioned JSON, ``save``/``load``).

Per concurrency level the aggregate keys are the ones ``vllm bench serve --save-result`` writes
where the two overlap (``completed``, ``duration``, ``output_throughput``, ``mean_ttft_ms``,
``p99_itl_ms``, ``spec_decode_acceptance_length`` …), so tools that read vLLM's JSON read ours.
Units follow vLLM: latencies in ms, ``duration`` in s, throughputs per second, and
``spec_decode_acceptance_rate`` in **percent** (the per-position rates are fractions).

Definitions (per request): TTFT = first token-carrying chunk − send; E2EL = last chunk − send;
TPOT = (E2EL − TTFT) / (output tokens − 1); ITL = the gaps between token-carrying chunks. Under
speculative decoding one chunk carries several tokens, so ITL > TPOT; ``mean_tokens_per_chunk``
shows by how much. Output tokens always come from the server's ``usage``.

Server side, per level: the ``/metrics`` counter deltas (``spec_decode_*``,
``server_generation_tokens``) and, when the server log is reachable over SSH, the log's own
spec-decode lines of the same window (``server_log``), cross-checked on the integer
Accepted/Drafted counts. A disagreement is a ``warnings`` entry of the level, never silent.

A run whose server stops answering keeps what it measured: the finished levels as they are, the
level in progress ``incomplete`` (its completed, failed and ``not_sent`` requests), and
``stopped`` saying where and why; such a report is never a good measurement (``BenchInterrupted``
in ``bench.stopped``).

Room for later results: ``tune``, ``compare`` and ``roofline`` are optional JSON objects owned by
the modules that fill them, and every level and the report have ``extras``.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dflashops import __version__
from dflashops.errors import BenchmarkError, read_capped, shorten
from dflashops.pydantic_errors import first_error_line

SCHEMA_VERSION = 1
MAX_REPORT_BYTES = 256 * 1024 * 1024  # per-request records of a long run: tens of MB
REPORT_KIND: Final = "dflashops-bench"
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
STATISTICS = ("mean", "median", "std", "p90", "p99")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResolvedConfig(_Strict):
    """What was benchmarked, resolved when the run started (a playbook, a container, a URL)."""

    container: str | None = None
    url: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    drafter: str | None = None
    method: str | None = Field(None, description='speculative method, "none" when off')
    num_speculative_tokens: int | None = None
    max_model_len: int | None = None
    server_args: dict[str, Any] = {}
    playbook: str | None = None
    dflashops_version: str = __version__
    server_log: str | None = Field(None, description="the log read per level (over SSH)")
    resolved_from: dict[str, str] = Field(
        {}, description='where each field came from: "playbook", "deployed.json", "server" …'
    )
    extras: dict[str, Any] = {}

    def label(self) -> str:
        """A short name for tables and plot legends, e.g. ``dflash k=15``."""
        method = self.method or "?"
        if self.num_speculative_tokens is not None and method != "none":
            return f"{method} k={self.num_speculative_tokens}"
        return method


class WorkloadInfo(_Strict):
    """The requests that were sent (the prompts themselves live in the workload)."""

    name: str
    api: Literal["chat", "completions"] = "chat"
    num_prompts: int
    requests_per_level: int
    warmup_requests: int
    max_tokens: int
    temperature: float
    ignore_eos: bool
    thinking: bool | None = Field(
        None, description="chat_template_kwargs.enable_thinking sent (None: not sent)"
    )
    source: str | None = None


class RequestRecord(_Strict):
    """One measured request (warm-up requests are never recorded)."""

    prompt_id: str
    success: bool
    error: str | None = None
    start_s: float = Field(description="send time, seconds after the level started")
    max_tokens: int | None = None
    ttft_ms: float | None = None
    e2el_ms: float | None = None
    tpot_ms: float | None = None
    itl_ms: list[float] = []
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    chunks: int = Field(0, description="chunks that carried generated text")
    finish_reason: str | None = None


class ServerLogCheck(_Strict):
    """The server log's stats lines written during one level, read by byte offset.

    ``accepted_tokens``/``drafted_tokens`` are the sums of the SpecDecoding lines' integers;
    ``num_drafts`` is derived from their printed mean acceptance length (exact when only one
    integer fits, see ``dflashops.metrics.logs.estimate_num_drafts``). ``agrees`` is None when
    there was nothing to compare (no counters, or a log that prints no counts).
    """

    path: str
    offset: int = Field(description="bytes into the file where the level's window starts")
    bytes_read: int
    stats_windows: int
    spec_decode_windows: int
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    num_drafts: int | None = None
    num_drafts_exact: bool = False
    per_position_acceptance: list[float] = []
    mean_generation_throughput: float | None = None
    agrees: bool | None = None


class LevelResult(_Strict):
    """One concurrency level: aggregates (vLLM key names), server-side spec decode, requests."""

    max_concurrency: int
    completed: int
    failed: int
    duration: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float | None = None
    median_ttft_ms: float | None = None
    std_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    median_tpot_ms: float | None = None
    std_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    median_itl_ms: float | None = None
    std_itl_ms: float | None = None
    p90_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_e2el_ms: float | None = None
    median_e2el_ms: float | None = None
    std_e2el_ms: float | None = None
    p90_e2el_ms: float | None = None
    p99_e2el_ms: float | None = None
    mean_tokens_per_chunk: float | None = None
    spec_decode_acceptance_length: float | None = None
    spec_decode_acceptance_rate: float | None = Field(None, description="percent, as vLLM")
    spec_decode_num_drafts: int | None = None
    spec_decode_draft_tokens: int | None = None
    spec_decode_accepted_tokens: int | None = None
    spec_decode_per_position_acceptance_rates: list[float] | None = None
    server_generation_tokens: int | None = Field(
        None, description="the server's generation-token counter over the level (all clients)"
    )
    client_cpu_s: float | None = Field(
        None, description="CPU time (user + system) this client spent sending the level"
    )
    server_log: ServerLogCheck | None = None
    prefix_cache_reset: bool | None = Field(
        None, description="whether the server's prefix cache was reset before the level"
    )
    incomplete: bool = Field(
        False,
        description="the server stopped answering during the level or its closing /metrics "
        "scrape: the numbers cover what was measured until then, the counters are missing",
    )
    not_sent: int = Field(0, description="requests never sent: the server had stopped answering")
    warnings: list[str] = []
    errors: list[str] = []
    requests: list[RequestRecord] = []
    extras: dict[str, Any] = {}

    def metric(self, statistic: str, metric: str) -> float | None:
        """``metric("p99", "tpot")`` → ``p99_tpot_ms``."""
        value = getattr(self, f"{statistic}_{metric}_ms")
        return None if value is None else float(value)

    def summary(self) -> dict[str, Any]:
        """The aggregates without the per-request records."""
        return self.model_dump(mode="json", exclude={"requests"})


class RunStopped(_Strict):
    """Why a run ended before its last level: the server stopped answering."""

    message: str = Field(description="the one line the command printed")
    error: str = Field(description='what failed, e.g. "connection refused at http://…/metrics"')
    concurrency: int = Field(description="the level in progress")
    phase: Literal["before", "during", "after"] = Field(
        description="where in that level: its warm-up or opening scrape, its requests, or its "
        "closing scrape (a level stopped during or after is kept, marked incomplete)"
    )
    levels_not_run: list[int] = []


class BenchReport(_Strict):
    """A saved benchmark. ``schema_version`` bumps on any incompatible change."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["dflashops-bench"] = REPORT_KIND
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    label: str | None = None
    config: ResolvedConfig
    workload: WorkloadInfo
    levels: list[LevelResult]
    tune: dict[str, Any] | None = None
    compare: dict[str, Any] | None = None
    roofline: dict[str, Any] | None = None
    stopped: RunStopped | None = Field(
        None, description="set when the run ended early: the server stopped answering"
    )
    notes: list[str] = Field([], description="how the run was made (what was skipped, and why)")
    warnings: list[str] = Field([], description="what may make the numbers misleading")
    extras: dict[str, Any] = {}

    def display_label(self) -> str:
        return self.label or self.config.label()

    def level(self, max_concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.max_concurrency == max_concurrency), None)

    def save(self, path: Path) -> Path:
        """Write atomically (a reader never sees half a file); parent folders are created."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: Path) -> BenchReport:
        """Read a saved report; every failure is a one-line ``BenchmarkError`` naming the file."""
        try:
            data = json.loads(read_capped(path, MAX_REPORT_BYTES).decode("utf-8"))
        except OSError as exc:
            raise BenchmarkError(f"{path}: cannot read: {exc.strerror or exc}") from exc
        except json.JSONDecodeError as exc:
            raise BenchmarkError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from exc
        except UnicodeDecodeError as exc:
            raise BenchmarkError(f"{path}: not UTF-8 text (byte {exc.start})") from exc
        except (ValueError, RecursionError) as exc:  # a 5,000-digit integer, nesting too deep
            raise BenchmarkError(
                f"{path}: not JSON dflashops reads ({shorten(str(exc), 100)})"
            ) from exc
        if not isinstance(data, dict) or data.get("kind") != REPORT_KIND:
            raise BenchmarkError(
                f"{path}: not a dflashops benchmark report",
                hint="`dflashops bench --out FILE` writes one",
            )
        version = data.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise BenchmarkError(
                f"{path}: schema_version {version!r} is newer than this dflashops reads "
                f"({SCHEMA_VERSION})",
                hint="upgrade dflashops",
            )
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise BenchmarkError(f"{path}: {first_error_line(exc, data)}") from exc
