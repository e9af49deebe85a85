"""Throughput and spec-decode windows from a saved vLLM or SGLang server log.

Formats, as vLLM and SGLang print them (read from their sources and real logs, per version):

- vLLM V1 periodic stats, every ``VLLM_LOG_STATS_INTERVAL`` s while busy: ``Engine 000: Avg prompt
  throughput: … tokens/s, Avg generation throughput: … tokens/s, Running: … reqs, Waiting: … reqs,
  [Deferred …, KV fetch …, Preemptions …,] GPU|CPU KV cache usage: …%, [Prefix cache hit rate: …%]``
  (0.8.5 has the same parts in one string; 0.9.2–0.11.0 drop the ``Engine`` prefix).
- vLLM V1 ``SpecDecoding metrics:`` right after it: 0.8.5–0.10.0 ``Draft acceptance rate, Mean
  acceptance length, Accepted, Drafted, Per-position acceptance rate``; 0.11.0+ ``Mean acceptance
  length, Accepted throughput, Drafted throughput, Accepted, Drafted, Per-position acceptance rate,
  Avg Draft acceptance rate``. The per-position list holds commas itself, so it is cut at ``Avg``.
- vLLM V0 (0.6.x): ``Avg prompt throughput …, Running, Swapped, Pending, GPU KV cache usage, CPU KV
  cache usage.``, an optional ``Prefix cache hit rate: GPU: …%, CPU: …%`` line, and ``Speculative
  metrics: Draft acceptance rate: <fraction>, System efficiency, Number of speculative tokens,
  Number of accepted tokens, Number of draft tokens, Number of emitted tokens.`` whose counts are
  cumulative since the engine started.
- SGLang: ``Decode batch…, #running-req: …, #token: …, token usage: …, [accept len: …, accept
  rate: …,] … gen throughput (token/s): …, #queue-req: …``.

Every number is read by its own label, so parts that a version adds, drops or reorders do not
break the others.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from dflashops.errors import ParseError

Source = Literal["vllm", "vllm-v0", "sglang"]

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_VLLM_HEADER = re.compile(
    r"(?:\((?P<process>[^()]*?)\s*pid=(?P<pid>\d+)\)\s+)?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)?\s+"
    r"\[?[^\s\]]+:\d+\]\s?"
    r"(?P<msg>.*)$"
)
_SGLANG_HEADER = re.compile(
    r"\[\d{4}-(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[.,]\d+)?(?:\s+(?P<process>[^\]]*))?\]\s+"
    r"(?P<msg>.*)$"
)
_ENGINE_PREFIX = re.compile(r"^(?:Engine (?P<idx>\d+)|(?P<n>\d+) Engines Aggregated): ")
_MARKERS = ("throughput", "SpecDecoding metrics:", "Speculative metrics:", "Prefix cache hit rate")
_NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)|nan|inf)"
_VERSION = re.compile(
    r"(?:█\s+version\s+|LLM engine \(v|vLLM API server version )(?P<v>\d+\.\d+[\w.+-]*)",
)


class LogWindow(BaseModel):
    """Where a line came from. ``timestamp`` is the log's own ``MM-DD HH:MM:SS`` (no year)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    line: int
    timestamp: str | None = None
    pid: int | None = None
    process: str | None = None
    engine: str | None = None
    source: Source = "vllm"


class ThroughputWindow(LogWindow):
    """One periodic stats line. Throughputs in tokens/s, percentages as printed (0–100)."""

    prompt_throughput: float | None = None
    generation_throughput: float | None = None
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    pending: int | None = None
    deferred: int | None = None
    preemptions: int | None = None
    corrupted: int | None = None
    kv_fetch_waiting: int | None = None
    kv_fetch_in_progress: int | None = None
    kv_fetch_completed_waiting: int | None = None
    kv_cache_device: str | None = None
    kv_cache_usage_pct: float | None = None
    cpu_kv_cache_usage_pct: float | None = None
    prefix_cache_hit_rate_pct: float | None = None
    cpu_prefix_cache_hit_rate_pct: float | None = None
    external_prefix_cache_hit_rate_pct: float | None = None
    mm_cache_hit_rate_pct: float | None = None
    used_tokens: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.generation_throughput or self.prompt_throughput)


class SpecDecodeWindow(LogWindow):
    """One spec-decode line.

    ``accepted_tokens``/``drafted_tokens`` are the integers the line prints: per interval for vLLM
    V1, since engine start for V0 (``cumulative``). SGLang prints only ``accept len`` and ``accept
    rate``. ``acceptance_rate_pct`` is the printed draft acceptance rate, in percent.
    """

    mean_acceptance_length: float | None = None
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    acceptance_rate_pct: float | None = None
    accepted_throughput: float | None = None
    drafted_throughput: float | None = None
    per_position_acceptance: list[float] = []
    num_spec_tokens: int | None = None
    emitted_tokens: int | None = None
    system_efficiency: float | None = None
    cumulative: bool = False

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_drafts(self) -> int | None:
        """Verify steps in the window; see ``estimate_num_drafts`` for how and how exactly."""
        estimate = self.drafts_estimate()
        return estimate[0] if estimate else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_drafts_exact(self) -> bool:
        estimate = self.drafts_estimate()
        return bool(estimate and estimate[1])

    def drafts_estimate(self) -> tuple[int, bool] | None:
        if self.source == "vllm-v0":
            if self.num_spec_tokens and self.drafted_tokens is not None:
                return self.drafted_tokens // self.num_spec_tokens, True
            if self.emitted_tokens is not None and self.accepted_tokens is not None:
                return self.emitted_tokens - self.accepted_tokens, True
            return None
        return estimate_num_drafts(
            self.accepted_tokens,
            self.mean_acceptance_length,
            drafted=self.drafted_tokens,
            per_position=self.per_position_acceptance,
        )


class ThroughputTotals(BaseModel):
    """Over all stats lines. Means are over active windows (any tokens/s), summed over engines."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    windows: int
    active_windows: int
    engines: int
    mean_prompt_throughput: float | None
    mean_generation_throughput: float | None
    peak_generation_throughput: float | None


class SpecDecodeTotals(BaseModel):
    """Over all spec-decode lines, recomputed from the integer Accepted/Drafted counts.

    ``num_drafts`` is derived from each window's mean acceptance length (drafts = accepted /
    (MAL − 1), rounded); MAL is printed with two decimals, so in large windows several integers
    fit and ``num_drafts_exact`` is False. The per-position rates are the windows' rates weighted
    by their drafts. For V0 logs, whose counts are cumulative, the totals are the last line's.
    SGLang prints no counts: only a mean of the windows' accept lengths is given.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    windows: int
    accepted_tokens: int | None
    drafted_tokens: int | None
    acceptance_rate_pct: float | None
    num_drafts: int | None
    num_drafts_exact: bool
    mean_acceptance_length: float | None
    per_position_acceptance: list[float]
    cumulative: bool = False


class LogSummary(BaseModel):
    """What ``parse-log`` reports."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine_version: str | None
    throughput_windows: list[ThroughputWindow]
    spec_decode_windows: list[SpecDecodeWindow]
    throughput_totals: ThroughputTotals
    spec_decode_totals: SpecDecodeTotals | None


def parse_log_file(path: Path) -> LogSummary:
    """Read and parse a log file (undecodable bytes are replaced, not fatal)."""
    try:
        # bytes, not read_text(): universal newlines would turn a progress bar's "\r" into lines
        text = path.read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        raise ParseError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_log(text)


def parse_log(lines: Iterable[str] | str) -> LogSummary:
    """Parse log text (or its lines) into windows and totals."""
    if isinstance(lines, str):
        # "\n" only: progress bars rewrite their line with "\r", and line numbers must match grep's
        lines = lines.split("\n")
    throughput: list[ThroughputWindow] = []
    spec: list[SpecDecodeWindow] = []
    version: str | None = None
    for number, raw in enumerate(lines, start=1):
        line = _ANSI.sub("", raw)
        if version is None and (found := _VERSION.search(line)):
            version = found.group("v")
        if not any(marker in line for marker in _MARKERS):
            continue  # cheap filter: most lines of a server log are not windows
        where = _locate(line, number)
        if where is None:
            continue
        header, msg = where
        for window in _parse_message(header, msg, throughput):
            if isinstance(window, ThroughputWindow):
                throughput.append(window)
            else:
                spec.append(window)
    return LogSummary(
        engine_version=version,
        throughput_windows=throughput,
        spec_decode_windows=spec,
        throughput_totals=throughput_totals(throughput),
        spec_decode_totals=spec_decode_totals(spec) if spec else None,
    )


def _locate(line: str, number: int) -> tuple[LogWindow, str] | None:
    """The header (line number, time, pid, process) and the message, or None if not a log line."""
    match = _VLLM_HEADER.search(line)
    if match:
        pid = match.group("pid")
        process = (match.group("process") or "").strip() or None
        return (
            LogWindow(
                line=number,
                timestamp=match.group("ts"),
                pid=int(pid) if pid else None,
                process=process,
            ),
            match.group("msg"),
        )
    match = _SGLANG_HEADER.search(line)
    if match:
        return (
            LogWindow(
                line=number,
                timestamp=match.group("ts"),
                process=(match.group("process") or "").strip() or None,
                source="sglang",
            ),
            match.group("msg"),
        )
    return None


def _parse_message(
    header: LogWindow, msg: str, previous: list[ThroughputWindow]
) -> list[ThroughputWindow | SpecDecodeWindow]:
    base = header.model_dump()
    prefix = _ENGINE_PREFIX.match(msg)
    if prefix:
        base["engine"] = prefix.group("idx") or f"{prefix.group('n')} aggregated"
        msg = msg[prefix.end() :]
    if header.source == "sglang":
        if not msg.startswith("Decode batch"):
            return []
        window = _sglang(base, msg)
        spec = _sglang_spec(window, msg)
        return [window, spec] if spec else [window]
    if "Avg prompt throughput:" in msg and "Avg generation throughput:" in msg:
        return [_vllm_stats(base, msg)]
    if msg.startswith("SpecDecoding metrics:"):
        base["engine"] = base["engine"] or _engine_of_last(previous, header)
        return [_vllm_spec(base, msg)]
    if msg.startswith("Speculative metrics:"):
        return [_vllm_v0_spec(base, msg)]
    if msg.startswith("Prefix cache hit rate: GPU:"):
        _attach_v0_prefix_cache(previous, header, msg)
    return []


def _engine_of_last(previous: list[ThroughputWindow], header: LogWindow) -> str | None:
    # The spec line is logged right after the stats line by the same logger (same process).
    for window in reversed(previous):
        if window.pid == header.pid and window.process == header.process:
            return window.engine
    return None


def _attach_v0_prefix_cache(previous: list[ThroughputWindow], header: LogWindow, msg: str) -> None:
    gpu, cpu = _float(msg, r"GPU: " + _NUM + "%"), _float(msg, r"CPU: " + _NUM + "%")
    for index in range(len(previous) - 1, -1, -1):
        window = previous[index]
        if window.pid == header.pid and window.process == header.process:
            previous[index] = window.model_copy(
                update={"prefix_cache_hit_rate_pct": gpu, "cpu_prefix_cache_hit_rate_pct": cpu}
            )
            return


def _vllm_stats(base: dict[str, object], msg: str) -> ThroughputWindow:
    fields: dict[str, object] = {
        "prompt_throughput": _float(msg, r"Avg prompt throughput: " + _NUM + " tokens/s"),
        "generation_throughput": _float(msg, r"Avg generation throughput: " + _NUM + " tokens/s"),
        "running": _int(msg, r"Running: (\d+) reqs"),
        "waiting": _int(msg, r"Waiting: (\d+) reqs"),
        "swapped": _int(msg, r"Swapped: (\d+) reqs"),
        "pending": _int(msg, r"Pending: (\d+) reqs"),
        "deferred": _int(msg, r"Deferred: (\d+) reqs"),
        "preemptions": _int(msg, r"Preemptions: (\d+)"),
        "corrupted": _int(msg, r"Corrupted: (\d+) reqs"),
        "prefix_cache_hit_rate_pct": _float(msg, r"(?<!External )Prefix cache hit rate: " + _NUM),
        "external_prefix_cache_hit_rate_pct": _float(
            msg, r"External prefix cache hit rate: " + _NUM
        ),
        "mm_cache_hit_rate_pct": _float(msg, r"MM cache hit rate: " + _NUM),
    }
    fetch = re.search(r"KV fetch: (\d+) waiting to start, (\d+) in progress, (\d+) completed", msg)
    if fetch:
        fields["kv_fetch_waiting"], fields["kv_fetch_in_progress"] = fetch[1], fetch[2]
        fields["kv_fetch_completed_waiting"] = fetch[3]
    usages = re.findall(r"(?:(\w+) )?KV cache usage: " + _NUM + "%", msg)
    if usages:
        fields["kv_cache_device"] = usages[0][0] or None
        fields["kv_cache_usage_pct"] = float(usages[0][1])
    if "Swapped:" in msg:  # V0: GPU usage, then the CPU swap space's usage
        base["source"] = "vllm-v0"
        if len(usages) > 1:
            fields["cpu_kv_cache_usage_pct"] = float(usages[1][1])
    return ThroughputWindow.model_validate({**base, **fields})


def _vllm_spec(base: dict[str, object], msg: str) -> SpecDecodeWindow:
    per_position: list[float] = []
    found = re.search(r"Per-position acceptance rate: (.*?)(?:, Avg Draft acceptance rate|$)", msg)
    if found:
        try:
            per_position = [float(part) for part in found[1].split(",") if part.strip()]
        except ValueError:
            raise ParseError(f"line {base['line']}: bad per-position rates {found[1]!r}") from None
    rate = _float(msg, r"Avg Draft acceptance rate: " + _NUM + "%")
    if rate is None:
        rate = _float(msg, r"Draft acceptance rate: " + _NUM + "%")
    return SpecDecodeWindow.model_validate(
        {
            **base,
            "mean_acceptance_length": _float(msg, r"Mean acceptance length: " + _NUM),
            "accepted_tokens": _int(msg, r"\bAccepted: (\d+) tokens"),
            "drafted_tokens": _int(msg, r"\bDrafted: (\d+) tokens"),
            "acceptance_rate_pct": rate,
            "accepted_throughput": _float(msg, r"Accepted throughput: " + _NUM + " tokens/s"),
            "drafted_throughput": _float(msg, r"Drafted throughput: " + _NUM + " tokens/s"),
            "per_position_acceptance": per_position,
            "num_spec_tokens": len(per_position) or None,
        }
    )


def _vllm_v0_spec(base: dict[str, object], msg: str) -> SpecDecodeWindow:
    fraction = _float(msg, r"Draft acceptance rate: " + _NUM)
    accepted = _int(msg, r"Number of accepted tokens: (\d+)")
    emitted = _int(msg, r"Number of emitted tokens: (\d+)")
    k = _int(msg, r"Number of speculative tokens: (\d+)")
    drafted = _int(msg, r"Number of draft tokens: (\d+)")
    drafts = drafted // k if k and drafted is not None else None
    if drafts is None and emitted is not None and accepted is not None:
        drafts = emitted - accepted
    return SpecDecodeWindow.model_validate(
        {
            **base,
            "source": "vllm-v0",
            "acceptance_rate_pct": None if fraction is None else 100.0 * fraction,
            "system_efficiency": _float(msg, r"System efficiency: " + _NUM),
            "num_spec_tokens": k,
            "accepted_tokens": accepted,
            "drafted_tokens": drafted,
            "emitted_tokens": emitted,
            "mean_acceptance_length": (
                1.0 + accepted / drafts if drafts and accepted is not None else None
            ),
            "cumulative": True,
        }
    )


def _sglang(base: dict[str, object], msg: str) -> ThroughputWindow:
    """A decode line's throughput part (``_sglang_spec`` reads its speculation part)."""
    usage = _float(msg, r"token usage: " + _NUM)
    return ThroughputWindow.model_validate(
        {
            **base,
            "generation_throughput": _float(msg, r"gen throughput \(token/s\): " + _NUM),
            "running": _int(msg, r"#running-req: (\d+)"),
            "waiting": _int(msg, r"#queue-req: (\d+)"),
            "used_tokens": _int(msg, r"#token: (\d+)"),
            "kv_cache_usage_pct": None if usage is None else 100.0 * usage,
        }
    )


def _sglang_spec(window: ThroughputWindow, msg: str) -> SpecDecodeWindow | None:
    accept_len = _float(msg, r"(?<!block )accept len: " + _NUM)
    if accept_len is None:
        return None
    rate = _float(msg, r"accept rate: " + _NUM)
    return SpecDecodeWindow(
        line=window.line,
        timestamp=window.timestamp,
        pid=window.pid,
        process=window.process,
        engine=window.engine,
        source="sglang",
        mean_acceptance_length=accept_len,
        acceptance_rate_pct=None if rate is None else 100.0 * rate,
    )


def _float(msg: str, pattern: str) -> float | None:
    """The number after a label; a printed ``nan`` (nothing drafted) reads as None."""
    found = re.search(pattern, msg)
    if not found:
        return None
    value = float(found[1])
    return value if math.isfinite(value) else None


def _int(msg: str, pattern: str) -> int | None:
    found = re.search(pattern, msg)
    return int(found[1]) if found else None


def estimate_num_drafts(
    accepted: int | None,
    mean_acceptance_length: float | None,
    *,
    drafted: int | None = None,
    per_position: list[float] | None = None,
) -> tuple[int, bool] | None:
    """Drafts in a vLLM V1 window, and whether that integer is certain.

    vLLM prints MAL = 1 + accepted/drafts with two decimals, so drafts = accepted / (MAL − 1)
    holds only up to rounding: the true MAL lies within ±0.005, which bounds drafts to an
    interval. The per-position rates (three decimals each; their sum is accepted/drafts) and
    drafts ≤ drafted narrow it further. One integer left: exact. Several: the rounded quotient,
    clamped into the interval, flagged inexact. Nothing accepted: drafted / k rounded up, where
    k is the number of printed positions (inexact: a draft may hold fewer than k tokens).
    """
    if accepted is None or mean_acceptance_length is None or math.isnan(mean_acceptance_length):
        return None
    if accepted == 0:
        if drafted == 0:
            return 0, True
        if drafted and per_position:
            # nothing accepted: MAL is 1.00 whatever the drafts; a draft holds at most k tokens
            # (k = the printed positions), exactly k for fixed-k drafters such as DFlash
            return math.ceil(drafted / len(per_position)), False
        return None
    low, high = 1.0, math.inf
    # accepted / drafts within [MAL - 1 - 0.005, MAL - 1 + 0.005]
    ratio_bounds = [(mean_acceptance_length - 1.0, 0.005)]
    if per_position:
        ratio_bounds.append((math.fsum(per_position), 0.0005 * len(per_position)))
    for centre, half_width in ratio_bounds:
        top, bottom = centre + half_width, centre - half_width
        if top > 0:
            low = max(low, accepted / top)
        if bottom > 0:
            high = min(high, accepted / bottom)
    if drafted:
        high = min(high, float(drafted))
    lo, hi = math.ceil(low - 1e-9), math.floor(high + 1e-9) if math.isfinite(high) else None
    guess = round(accepted / (mean_acceptance_length - 1.0)) if mean_acceptance_length > 1 else lo
    if hi is None or lo > hi:
        return max(guess, 1), False
    return min(max(guess, lo), hi), lo == hi


def throughput_totals(windows: list[ThroughputWindow]) -> ThroughputTotals:
    active = [w for w in windows if w.active]
    by_engine: dict[tuple[object, ...], list[ThroughputWindow]] = {}
    for window in active:
        by_engine.setdefault((window.pid, window.process, window.engine), []).append(window)

    def summed_mean(values: dict[tuple[object, ...], list[float]]) -> float | None:
        means = [math.fsum(v) / len(v) for v in values.values() if v]
        return math.fsum(means) if means else None

    def per_engine(attr: str) -> dict[tuple[object, ...], list[float]]:
        return {
            key: [value for w in group if (value := getattr(w, attr)) is not None]
            for key, group in by_engine.items()
        }

    peaks = [w.generation_throughput for w in windows if w.generation_throughput is not None]
    return ThroughputTotals(
        windows=len(windows),
        active_windows=len(active),
        engines=len({(w.pid, w.process, w.engine) for w in windows}),
        mean_prompt_throughput=summed_mean(per_engine("prompt_throughput")),
        mean_generation_throughput=summed_mean(per_engine("generation_throughput")),
        peak_generation_throughput=max(peaks) if peaks else None,
    )


def spec_decode_totals(windows: list[SpecDecodeWindow]) -> SpecDecodeTotals:
    cumulative = any(w.cumulative for w in windows)
    if cumulative:
        # counts since engine start: the last line of each engine holds its totals
        last: dict[tuple[object, ...], SpecDecodeWindow] = {}
        for window in windows:
            last[(window.pid, window.process, window.engine)] = window
        counted = list(last.values())
    else:
        counted = windows
    with_counts = [w for w in counted if w.accepted_tokens is not None]
    if not with_counts:  # SGLang: only per-window accept lengths
        lengths = [w.mean_acceptance_length for w in windows if w.mean_acceptance_length]
        rates = [w.acceptance_rate_pct for w in windows if w.acceptance_rate_pct is not None]
        return SpecDecodeTotals(
            windows=len(windows),
            accepted_tokens=None,
            drafted_tokens=None,
            acceptance_rate_pct=math.fsum(rates) / len(rates) if rates else None,
            num_drafts=None,
            num_drafts_exact=False,
            mean_acceptance_length=math.fsum(lengths) / len(lengths) if lengths else None,
            per_position_acceptance=[],
        )
    accepted = sum(w.accepted_tokens or 0 for w in with_counts)
    drafted_values = [w.drafted_tokens for w in with_counts]
    drafted = None if None in drafted_values else sum(d or 0 for d in drafted_values)
    estimates = [w.drafts_estimate() for w in with_counts]
    drafts = None if None in estimates else sum(e[0] for e in estimates if e)
    return SpecDecodeTotals(
        windows=len(windows),
        accepted_tokens=accepted,
        drafted_tokens=drafted,
        acceptance_rate_pct=100.0 * accepted / drafted if drafted else None,
        num_drafts=drafts,
        num_drafts_exact=all(e is not None and e[1] for e in estimates),
        mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
        per_position_acceptance=_weighted_positions(with_counts, estimates),
        cumulative=cumulative,
    )


def _weighted_positions(
    windows: list[SpecDecodeWindow], estimates: list[tuple[int, bool] | None]
) -> list[float]:
    width = max((len(w.per_position_acceptance) for w in windows), default=0)
    result = []
    for pos in range(width):
        pairs = [
            (w.per_position_acceptance[pos], e[0])
            for w, e in zip(windows, estimates, strict=True)
            if e and e[0] and pos < len(w.per_position_acceptance)
        ]
        weight = sum(d for _, d in pairs)
        if not weight:
            break
        result.append(math.fsum(rate * d for rate, d in pairs) / weight)
    return result
