"""Throughput and spec-decode windows from a saved vLLM or SGLang server log.

A line is read wherever its message starts (``log_lines``: headers of any shape, or none, and a
message wrapped over several lines joined back), then by the engine's format (``log_vllm`` for
vLLM V0 and V1, ``log_sglang`` for SGLang). Every number is read by its own label, so parts that
a version adds, drops or reorders do not break the others, and a number is read only with what
the format prints after it, so a line cut mid-way yields what it holds and is flagged
``truncated``.

What the windows mean, per engine and version, and the one definition of the draft acceptance
rate used across them: ``log_models.RATE_FORMULAS`` and ``CONSISTENT_RATE``.
"""

from __future__ import annotations

import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from dflashops.errors import ParseError
from dflashops.metrics import log_sglang, log_vllm
from dflashops.metrics.log_lines import (
    MAX_NUMBER_DIGITS,
    Located,
    logical_lines,
    unreadable_number,
)
from dflashops.metrics.log_models import (
    CONSISTENT_RATE,
    RATE_FORMULAS,
    LogSummary,
    LogWindow,
    SpecDecodeTotals,
    SpecDecodeWindow,
    ThroughputWindow,
)
from dflashops.metrics.log_totals import spec_decode_totals, throughput_totals

_ENGINE_PREFIX = re.compile(r"^(?:Engine (?P<idx>\d+)|(?P<n>\d+) Engines Aggregated): ")
_DP_PROCESS = re.compile(r"^EngineCore_DP(\d+)$")
_VERSION = re.compile(
    r"(?:█\s+version\s+|LLM engine \(v|vLLM API server version )(?P<v>\d+\.\d+[\w.+-]*)"
)
READ_FORMATS = (
    "vLLM V1 'Engine NNN: Avg prompt throughput …' and 'SpecDecoding metrics: …' lines, vLLM V0 "
    "'Avg prompt throughput …' and 'Speculative metrics: …' lines, SGLang 'Decode batch …' lines"
)


class UnrecognizedLogError(ParseError):
    """The file holds none of the lines parse-log reads: not a server log, or stats turned off."""

    cli_exit_code = 2  # invalid input (docs/reference.md), like an unreadable inventory


#: longest line kept; a window line is a few hundred characters, the rest of a longer one is
#: dropped so one hostile line cannot hold the whole file in memory or feed the regexes megabytes
MAX_LINE_BYTES = 64 * 1024


def parse_log_file(path: Path) -> LogSummary:
    """Read and parse a log file line by line, in bounded memory (undecodable bytes are
    replaced, not fatal)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):  # /dev/zero never ends, a FIFO blocks open()
            raise UnrecognizedLogError(f"{path}: not a regular file")
        # bytes, not text mode: universal newlines would turn a progress bar's "\r" into lines
        with path.open("rb") as handle:
            return parse_log(_file_lines(handle))
    except OSError as exc:
        raise UnrecognizedLogError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _file_lines(handle: BinaryIO) -> Iterator[str]:
    """Lines split on "\n" only, each cut at :data:`MAX_LINE_BYTES` (its rest is skipped)."""
    while True:
        chunk = handle.readline(MAX_LINE_BYTES)
        if not chunk:
            return
        if not chunk.endswith(b"\n") and len(chunk) == MAX_LINE_BYTES:
            while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
        yield chunk.rstrip(b"\n").decode("utf-8", errors="replace")


def require_windows(summary: LogSummary, source: str) -> LogSummary:
    """The summary, or ``UnrecognizedLogError`` when the log held no window at all."""
    if summary.throughput_windows or summary.spec_decode_windows:
        return summary
    if summary.skipped_lines:
        raise UnrecognizedLogError(
            f"{source}: every stats line holds a number that is not finite or has more than "
            f"{MAX_NUMBER_DIGITS} digits (lines {_lines(summary.skipped_lines)})",
            hint="the log was edited or corrupted; engines print finite rates and counts",
        )
    raise UnrecognizedLogError(
        f"{source}: no throughput or spec-decode lines",
        hint=f"parse-log reads {READ_FORMATS}; vLLM logs them every VLLM_LOG_STATS_INTERVAL s "
        "while busy, at INFO, unless --disable-log-stats; SGLang every --decode-log-interval "
        "decode steps",
    )


def parse_log(lines: Iterable[str] | str) -> LogSummary:
    """Parse log text (or its lines) into windows, totals and notes."""
    if isinstance(lines, str):
        # "\n" only: progress bars rewrite their line with "\r", and line numbers must match grep's
        lines = lines.split("\n")
    throughput: list[ThroughputWindow] = []
    spec: list[SpecDecodeWindow] = []
    version: str | None = None
    sglang_args: tuple[int | None, int | None] | None = None
    skipped: list[int] = []
    for number, line, located in logical_lines(lines, _format_read):
        if version is None and (found := _VERSION.search(line)):
            version = found.group("v")
        if sglang_args is None and "server_args=" in line:
            sglang_args = log_sglang.server_args_draft_tokens(line)
        if located is None:
            continue
        if unreadable_number(located.message):
            skipped.append(number)
            continue
        _read(number, located, throughput, spec)
    notes: list[str] = []
    if skipped:
        notes.append(
            f"{len(skipped)} stats line(s) skipped: a number that is not finite or has more "
            f"than {MAX_NUMBER_DIGITS} digits (lines {_lines(skipped)})"
        )
    spec = _sglang_rates(spec, sglang_args, notes)
    totals = spec_decode_totals(spec) if spec else None
    notes.extend(_notes(throughput, spec, totals))
    sources = {w.source for w in [*throughput, *spec]}
    return LogSummary(
        engine_version=version,
        engine=None if not sources else "sglang" if sources == {"sglang"} else "vllm",
        throughput_windows=throughput,
        spec_decode_windows=spec,
        throughput_totals=throughput_totals(throughput),
        spec_decode_totals=totals,
        notes=notes,
        skipped_lines=skipped,
    )


def _format_read(located: Located) -> int:
    """How much of its format a message holds: each field read (each listed rate counting), and
    one more if it reaches its format's end. A wrapped line is joined only as far as this grows."""
    message = located.message
    if unreadable_number(message):
        return -1
    if located.kind == "vllm_prefix_v0":
        return sum(value is not None for value in log_vllm.prefix_cache_v0(message))
    windows: list[LogWindow | None]
    base: dict[str, object] = {"line": 0}
    if located.kind == "sglang_decode":
        windows = list(log_sglang.decode_windows(base, message))
    elif located.kind == "vllm_stats":
        windows = [log_vllm.stats_window(base, message)]
    elif located.kind == "vllm_spec_v0":
        windows = [log_vllm.spec_window_v0(base, message)]
    else:
        windows = [log_vllm.spec_window(base, message)]
    return sum(_fields_read(window) for window in windows if window is not None)


def _fields_read(window: LogWindow) -> int:
    read = window.model_dump(exclude={"line", "truncated"}, exclude_none=True)
    return sum(len(value) if isinstance(value, list) else 1 for value in read.values()) + (
        not window.truncated
    )


def _read(
    number: int,
    located: Located,
    throughput: list[ThroughputWindow],
    spec: list[SpecDecodeWindow],
) -> None:
    base: dict[str, object] = {
        "line": number,
        "timestamp": located.timestamp,
        "pid": located.pid,
        "process": located.process,
    }
    message, kind = located.message, located.kind
    if kind == "sglang_decode":
        ranks = located.rank_tags or ""
        dp = re.search(r"\bDP(\d+)\b", ranks)
        base |= {
            "source": "sglang",
            "process": located.rank_tags or located.process,
            "engine": f"DP{dp[1]}" if dp else None,
        }
        decode, spec_part = log_sglang.decode_windows(base, message)
        throughput.append(decode)
        if spec_part is not None:
            spec.append(spec_part)
        return
    prefix = _ENGINE_PREFIX.match(message)
    if prefix:
        base["engine"] = prefix.group("idx") or f"{prefix.group('n')} aggregated"
        message = message[prefix.end() :]
    elif (rank := _DP_PROCESS.match(located.process or "")) is not None:
        base["engine"] = f"{int(rank[1]):03d}"  # the engine core of DP rank n is engine n
    if kind == "vllm_stats":
        throughput.append(log_vllm.stats_window(base, message))
    elif kind in ("vllm_spec", "vllm_spec_bare"):
        # the spec line follows the stats line of the same engine, logged by the same process
        base["engine"] = base.get("engine") or _engine_of_last(throughput, located)
        spec_line = log_vllm.spec_window(base, message)
        if spec_line is not None:
            spec.append(spec_line)
    elif kind == "vllm_spec_v0":
        spec.append(log_vllm.spec_window_v0(base, message))
    elif kind == "vllm_prefix_v0":
        _attach_v0_prefix_cache(throughput, located, message)


def _engine_of_last(previous: list[ThroughputWindow], located: Located) -> str | None:
    for window in reversed(previous):
        if window.pid == located.pid and window.process == located.process:
            return window.engine
    return None


def _attach_v0_prefix_cache(
    previous: list[ThroughputWindow], located: Located, message: str
) -> None:
    gpu, cpu = log_vllm.prefix_cache_v0(message)
    for index in range(len(previous) - 1, -1, -1):
        window = previous[index]
        if window.pid == located.pid and window.process == located.process:
            previous[index] = window.model_copy(
                update={"prefix_cache_hit_rate_pct": gpu, "cpu_prefix_cache_hit_rate_pct": cpu}
            )
            return


def _sglang_rates(
    spec: list[SpecDecodeWindow],
    args: tuple[int | None, int | None] | None,
    notes: list[str],
) -> list[SpecDecodeWindow]:
    """SGLang windows with the formula of their ``accept rate`` and the consistent rate."""
    sglang = [w for w in spec if w.source == "sglang" and w.acceptance_rate_pct is not None]
    if not sglang:
        return spec
    formula, n = log_sglang.rate_formula(sglang, args)
    basis = "the log's server_args" if args is not None else "the windows' numbers"
    if formula == "unknown":
        notes.append(
            "SGLang 'accept rate' is printed as is: its formula changed (PR #23530) and "
            f"{basis} fit both or neither, so no rate in the consistent definition is given"
        )
    elif formula == "sglang-either":
        notes.append(
            f"SGLang 'accept rate' fits both its formulas (PR #23530) with one n: {n} draft "
            f"tokens per step (from {basis}), k = {n - 1 if n else '?'}, where they agree "
            f"(accept rate 1.00 at accept len n); also given as {CONSISTENT_RATE}"
        )
    else:
        draft_tokens = f", {n} draft tokens per step" if n else ", draft tokens per step unknown"
        notes.append(
            f"SGLang 'accept rate' = {RATE_FORMULAS[formula]} (from {basis}{draft_tokens}); "
            f"also given as {CONSISTENT_RATE}"
        )
    ids = {id(w) for w in sglang}
    return [
        window.model_copy(
            update={
                "acceptance_rate_formula": formula,
                "draft_acceptance_rate_pct": log_sglang.consistent_rate_pct(window, formula, n),
                "num_spec_tokens": n - 1 if n else None,
            }
        )
        if id(window) in ids
        else window
        for window in spec
    ]


def _notes(
    throughput: list[ThroughputWindow],
    spec: list[SpecDecodeWindow],
    totals: SpecDecodeTotals | None,
) -> list[str]:
    notes = []
    cut = sorted(w.line for w in [*throughput, *spec] if w.truncated)
    if cut:
        notes.append(f"lines cut short, read up to where they stop: {_lines(cut)}")
    if any(w.source == "vllm-v0" for w in spec):
        notes.append(
            "vLLM V0: acceptance length = emitted / steps (steps = draft tokens / k); its "
            f"'Draft acceptance rate' is {RATE_FORMULAS['v0-accepted/drafted']}"
        )
    # where the printed rate is not accepted drafts / drafts, show that one too
    other = [
        w
        for w in spec
        if w.acceptance_rate_formula in ("v0-accepted/drafted", "sglang-with-bonus")
        and w.draft_acceptance_rate_pct is not None
    ]
    if other:
        rates = ", ".join(f"{w.draft_acceptance_rate_pct:.1f}" for w in other[:12])
        rates += " …" if len(other) > 12 else ""
        overall = totals.draft_acceptance_rate_pct if totals else None
        total = "" if overall is None else f"; total {overall:.1f}%"
        notes.append(f"draft acceptance rate as accepted drafts / drafts: {rates}%{total}")
    return notes


def _lines(numbers: list[int]) -> str:
    """The first line numbers, then "…" when there are more than eight."""
    return ", ".join(str(line) for line in numbers[:8]) + (" …" if len(numbers) > 8 else "")
