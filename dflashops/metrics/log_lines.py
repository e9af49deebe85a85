"""Find the periodic stats messages in a log line, whatever was written around them.

Real logs reach an operator with more or less than the engine's own header: pasted into an
issue without it, shipped by journald (``Dec 02 10:00:11 host vllm[99]: …``) or by ``docker logs
--timestamps`` (``2026-05-12T08:01:39.331095044Z …``), reformatted by Python's ``logging``
(``2025-07-08 17:24:00 - vllm.engine.metrics - INFO - …``, ``INFO:vllm.engine.metrics:…``), tagged
by vLLM's process prefix (``(APIServer pid=1)``, ``(EngineCore_DP0 pid=7)``) or Ray's
(``(SGLangEngine pid=5, ip=10.0.0.1)``), coloured, with CRLF endings or a progress bar's ``\\r``.

So the message is found by its own first words (``Avg prompt throughput:``, ``SpecDecoding
metrics:``, ``Speculative metrics:``, ``Decode batch``, …) wherever it starts, and whatever
stands before it is searched for the parts of a header that it may hold: the engine's timestamp
(preferred), an outer timestamp, a process tag and pid, SGLang's rank tags (``TP0``, ``DP6 TP6
EP6``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

# The first words of each message kind; the leftmost match in a line starts the message.
MESSAGE_START = re.compile(
    # digit runs are bounded: an unbounded "\d+" before a literal backtracks quadratically over
    # a hostile line of digits (a 64k-digit number took 24 s)
    r"(?P<vllm_stats>(?:Engine \d{1,6}: |(?<!\d)\d{1,6} Engines Aggregated: )?"
    r"Avg prompt throughput:)"
    r"|(?P<vllm_spec>SpecDecoding metrics:)"
    r"|(?P<vllm_spec_v0>Speculative metrics:)"
    r"|(?P<vllm_prefix_v0>Prefix cache hit rate: GPU:)"
    r"|(?P<sglang_decode>Decode batch(?: \[\d+\])?[.,] #running-req:)"
    # a SpecDecoding line whose prefix was cut off or stripped (its counts are checked later)
    r"|(?P<vllm_spec_bare>(?:Draft acceptance rate: [\d.]+%, )?Mean acceptance length: )"
)
CHEAP_MARKERS = (
    "throughput:",
    "SpecDecoding metrics:",
    "Speculative metrics:",
    "Prefix cache hit rate: GPU:",
    "Decode batch",
    "Mean acceptance length:",
)

_PROCESS_TAG = re.compile(
    r"\((?P<process>[A-Za-z][\w.-]{0,100}) pid=(?P<pid>\d{1,10})(?:, ip=[^)\s]+)?\)"
)
_ENGINE_HEADER = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)?\s+"
    r"\[?[^\s\]]{1,200}:\d+\]"
)
_SGLANG_HEADER = re.compile(
    r"\[\d{4}-(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:[.,]\d+)?(?P<tags>(?:\s+[A-Z]{1,4}\d+)*)\]"
)
_ISO_TIME = re.compile(r"\d{4}-(?P<date>\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})")
_SYSLOG = re.compile(
    r"^(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d{1,2}) "
    r"(?P<time>\d{2}:\d{2}:\d{2}) \S+ [^\s\[]+\[(?P<pid>\d{1,10})\]:"
)
# SGLang under a custom logging format: "2025-12-04 20:35:53 INFO 151972 [file.py:287] …"
_LEVEL_PID = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+(?P<pid>\d{1,10})\s+\[[^\]\s]{1,200}:\d+\]"
)
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


@dataclass(frozen=True)
class Located:
    """One message found in a line: its kind, its text and what the prefix told about it."""

    kind: str
    message: str
    timestamp: str | None
    pid: int | None
    process: str | None
    rank_tags: str | None


def clean(raw: str) -> str:
    """The visible text of a line: colours removed, the segment a ``\\r`` left on screen."""
    line = ANSI.sub("", raw).rstrip("\r\n")
    if "\r" in line:
        # a progress bar rewrites its line with "\r": what a terminal shows is the last segment
        # that holds text; a stats message printed after the bar is in that segment
        segments = [part for part in line.split("\r") if part.strip()]
        with_message = [part for part in segments if MESSAGE_START.search(part)]
        line = (with_message or segments or [""])[-1]
    return line


def locate(line: str) -> Located | None:
    """The first stats message in a cleaned line, or None."""
    found = MESSAGE_START.search(line)
    if found is None or found.lastgroup is None:
        return None
    prefix = line[: found.start()]
    tags = list(_PROCESS_TAG.finditer(prefix))
    process = tags[-1].group("process") if tags else None
    pid = int(tags[-1].group("pid")) if tags else None
    timestamp, rank_tags = _timestamp_and_ranks(prefix)
    if pid is None:
        pid = _outer_pid(prefix)
    return Located(
        kind=found.lastgroup,
        message=line[found.start() :].rstrip(),
        timestamp=timestamp,
        pid=pid,
        process=process,
        rank_tags=rank_tags,
    )


def _timestamp_and_ranks(prefix: str) -> tuple[str | None, str | None]:
    """``MM-DD HH:MM:SS`` from the engine's own header if there is one, else an outer one."""
    engine = list(_ENGINE_HEADER.finditer(prefix))
    if engine:
        return engine[-1].group("ts"), None
    sglang = list(_SGLANG_HEADER.finditer(prefix))
    if sglang:
        tags = " ".join(sglang[-1].group("tags").split()) or None
        return sglang[-1].group("ts"), tags
    iso = list(_ISO_TIME.finditer(prefix))
    if iso:
        return f"{iso[-1].group('date')} {iso[-1].group('time')}", None
    syslog = _SYSLOG.match(prefix)
    if syslog:
        month = _MONTHS.index(syslog.group("mon")) + 1
        return f"{month:02d}-{int(syslog.group('day')):02d} {syslog.group('time')}", None
    return None, None


def _outer_pid(prefix: str) -> int | None:
    for pattern in (_LEVEL_PID, _SYSLOG):
        found = pattern.search(prefix)
        if found:
            return int(found.group("pid"))
    return None


#: digits in the longest number an engine prints (a token count); a longer one is hostile or garbled
MAX_NUMBER_DIGITS = 30
_UNREADABLE_NUMBER = re.compile(
    rf"\d{{{MAX_NUMBER_DIGITS + 1}}}|:\s{{0,8}}[-+]?inf(?:inity)?\b", re.IGNORECASE
)


def unreadable_number(message: str) -> bool:
    """Whether a message holds a number no engine prints: ``inf`` (a rate is finite, an empty
    one prints ``nan``) or more than :data:`MAX_NUMBER_DIGITS` digits. Such a line is skipped
    whole, and counted, rather than read half (``int()`` refuses 4,300 digits)."""
    return _UNREADABLE_NUMBER.search(message) is not None


def read_float(message: str, pattern: str) -> float | None:
    """The number a pattern's first group captures; a printed ``nan`` (nothing drafted) is None.

    Patterns end with what the format prints after the number (a unit, a comma, a full stop), so
    a number cut off by a truncated line is not read as a smaller one.
    """
    found = re.search(pattern, message)
    if not found or len(found[1]) > 2 * MAX_NUMBER_DIGITS:
        return None
    value = float(found[1])
    return value if math.isfinite(value) else None


def read_int(message: str, pattern: str) -> int | None:
    found = re.search(pattern, message)
    return int(found[1]) if found and len(found[1]) <= MAX_NUMBER_DIGITS else None
