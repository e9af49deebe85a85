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

from dflashops.errors import ParseError
from dflashops.metrics.log_models import (
    LogSummary,
    LogWindow,
    SpecDecodeWindow,
    ThroughputWindow,
)
from dflashops.metrics.log_totals import spec_decode_totals, throughput_totals

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
