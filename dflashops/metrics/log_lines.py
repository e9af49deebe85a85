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

A message may also reach the reader cut over several lines: wrapped by the reporter of a public
issue (``SpecDecoding metrics: Mean acceptance length: 2.77,`` then ``Accepted: 626 tokens, …``)
or by a terminal mid-word. The lines after a stats line that start no record of their own (no
level, timestamp, process tag or message) are joined to it, as far as that lets more of the
format be read (``logical_lines``).
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator
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


#: a stats line is joined with at most this many continuation lines, into at most this many
#: characters: the longest format (64 per-position rates) is under 1,000, however narrow the
#: terminal that cut it, and a hostile file must not make one line of megabytes
MAX_CONTINUATIONS = 16
MAX_JOINED_CHARS = 8192
# what every record holds somewhere and no stats message does: a level, a time of day, a pid
_OWN_RECORD = re.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b|\d:\d\d:\d\d|pid=")
# the end of a header (vLLM's "[file.py:12]", SGLang's "[2025-01-02 10:00:00 TP0]", Python
# logging's "INFO -" or "INFO:name:") with no message after it: the next line may hold it
_HEADER_END = re.compile(
    r"(?:\[?[^\]\s]{1,200}:\d{1,6}\]|\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]{0,40}\]"
    r"|\b(?:DEBUG|INFO|WARNING)(?: -|:[\w.]{1,100}:))\s*$"
)
# what a format prints right before a message that a cut can leave at a line's start: a line
# "etrics: Mean acceptance length: …" continues "… SpecDecoding m", it is no prefix-less record
_LEADS = {
    "vllm_spec_bare": re.compile(
        r"SpecDecoding metrics:\s*(?:Draft acceptance rate: [\d.]{1,20}%,\s*)?$"
    ),
    "vllm_stats": re.compile(r"(?:Engine \d{1,6}|\d{1,6} Engines Aggregated):\s*$"),
}
# the first words of each message, cut anywhere: a line ending in one ("… Avg prompt t") may
# have its message go on at the next line (engine numbers written 0, as _ends_in_a_cut_start)
_CUT_STARTS = frozenset(
    phrase[:end].rstrip()
    for phrase in (
        "Engine 0: Avg prompt throughput:",
        "0 Engines Aggregated: Avg prompt throughput:",
        "Avg prompt throughput:",
        "SpecDecoding metrics:",
        "Speculative metrics:",
        "Prefix cache hit rate: GPU:",
        "Decode batch, #running-req:",
        "Decode batch. #running-req:",
        "Decode batch [0], #running-req:",
        "Mean acceptance length:",
    )
    for end in range(1, len(phrase) + 1)
)
_DIGITS = re.compile(r"\d+")

#: how much of its format a located message holds; a join must raise it
FormatRead = Callable[[Located], int]
Numbered = tuple[int, str]


def _continues(previous: str, line: str) -> bool:
    """Whether a cleaned line may continue the text before it: it is not blank (a paragraph's
    end) and starts no record of its own (no level, time of day, pid or message of its own)."""
    if not line.strip() or _OWN_RECORD.search(line):
        return False
    found = MESSAGE_START.search(line)
    if found is None or found.lastgroup is None:
        return True
    before = line[: found.start()]
    if not before.strip() and _HEADER_END.search(previous[-256:]):
        return True
    lead = _LEADS.get(found.lastgroup)
    # bounded: what a cut leaves of a lead is short, and either line may be long
    return (
        lead is not None
        and len(before) <= 64
        and lead.search(_glue(previous[-64:], before)) is not None
    )


def logical_lines(
    lines: Iterable[str], format_read: FormatRead
) -> Iterator[tuple[int, str, Located | None]]:
    """Each line cleaned, with grep's line number and its stats message if it holds one. A stats
    line cut over several lines comes back joined and numbered by its first line; its
    continuations are not given on their own."""
    numbered = ((number, clean(raw)) for number, raw in enumerate(lines, start=1))
    ahead: deque[Numbered] = deque()  # lines read ahead, each given its own turn later
    while True:
        if ahead:
            number, line = ahead.popleft()
        elif (taken := next(numbered, None)) is not None:
            number, line = taken
        else:
            return
        located = _locate_cheaply(line)
        if located is not None or _message_cut_at_end(line, numbered, ahead):
            run = _continuation_run(line, numbered, ahead)
            joined, used = _joined(line, located, run, format_read)
            if used:
                for _ in range(used):
                    ahead.popleft()
                line, located = joined, locate(joined)
        yield number, line, located


def _locate_cheaply(line: str) -> Located | None:
    # most lines of a server log are not stats: a substring test spares them the regex
    return locate(line) if any(marker in line for marker in CHEAP_MARKERS) else None


def _message_cut_at_end(line: str, numbered: Iterator[Numbered], ahead: deque[Numbered]) -> bool:
    """Whether a line with no message ends where one was cut (in its first words, or right after
    its header) and the next line completes its first words. Checked in that order: most lines
    are followed by a record, and the cheap test spares the rest."""
    if not ahead and (taken := next(numbered, None)) is not None:
        ahead.append(taken)
    if not ahead or not _continues(line, ahead[0][1]) or not _ends_in_a_cut_start(line):
        return False
    return _locate_cheaply(_glue(line, ahead[0][1])) is not None


def _ends_in_a_cut_start(line: str) -> bool:
    if _HEADER_END.search(line[-256:]):
        return True
    words = _DIGITS.sub("0", line[-64:]).split()  # engine numbers as in _CUT_STARTS
    return any(
        " ".join(words[-count:]) in _CUT_STARTS for count in range(1, min(len(words), 5) + 1)
    )


def _continuation_run(line: str, numbered: Iterator[Numbered], ahead: deque[Numbered]) -> list[str]:
    """The lines after ``line`` that may continue it, read into ``ahead`` up to the one that
    stops the run (kept for its own turn) or the bound."""
    run: list[str] = []
    so_far = line[-128:]  # enough of the joined text to hold the lead of a message cut short
    for index in range(MAX_CONTINUATIONS):
        if index == len(ahead):
            taken = next(numbered, None)
            if taken is None:
                break
            ahead.append(taken)
        part = ahead[index][1]
        if not _continues(so_far, part):
            break
        run.append(part)
        so_far = _glue(so_far, part)[-128:]
    return run


def _joined(
    line: str, located: Located | None, run: list[str], format_read: FormatRead
) -> tuple[str, int]:
    """The line joined with the continuations that let the most of its format be read, and how
    many it took (the fewest, on a tie): a complete line followed by other text takes none."""
    best, best_read, used = line, -1 if located is None else format_read(located), 0
    joined = line
    for count, part in enumerate(run, start=1):
        if len(joined) + len(part) > MAX_JOINED_CHARS:
            break
        # a number cut at a line's end reads as a smaller one ("#queue-req: 6" of 65): digits
        # that go on at the next line's start are its rest, even though no more fields are read
        rest_of_a_number = joined[-1:].isdigit() and part[:1].isdigit()
        joined = _glue(joined, part)
        found = _locate_cheaply(joined)
        read = -1 if found is None else format_read(found)
        if read > best_read or (read == best_read >= 0 and rest_of_a_number):
            best, best_read, used = joined, read, count
    return best, used


def _glue(head: str, tail: str) -> str:
    """Two pieces of one message, with the space the cut took if it took one: a terminal cuts
    anywhere and keeps every character (a space may end one line or start the next), a
    reporter's wrap breaks at a space and drops it."""
    if not head.strip() or not tail.strip():
        return head.strip() or tail.strip()
    if head != head.rstrip() or tail != tail.lstrip():
        return f"{head.rstrip()} {tail.strip()}"
    return head + tail if _cut_in_a_word(head, tail) else f"{head} {tail}"


# the words of the labels parse-log reads: a cut between two letters that rejoins one of them was
# a terminal's cut inside it; any other, a wrap at the space between two words
_LABELS = """Avg prompt generation throughput tokens/s Running Waiting Swapped Pending Deferred reqs
    Preemptions Corrupted KV fetch waiting to start in progress completed cache usage Prefix
    prefix External MM hit rate GPU CPU Engine Engines Aggregated SpecDecoding Speculative
    metrics Mean Current speculative depth acceptance length Accepted Drafted Draft
    Per-position System efficiency Number of tokens accepted draft emitted Decode batch
    #running-req #token token accept len block cuda graph gen (token/s) #queue-req"""
_LABEL_WORDS = frozenset(re.findall(r"\S+", _LABELS))
_WORD_END = re.compile(r"[\w#(/-]+$")
_WORD_START = re.compile(r"^[\w/)-]+")


def _cut_in_a_word(head: str, tail: str) -> bool:
    """Whether a cut that left no space fell inside a word or number: the formats put a space
    after every comma and colon and before every "(" and "#", none inside a number, before a
    unit sign or punctuation, or after a hyphen, slash or "#"; a number and a word are always
    apart."""
    last, first = head[-1], tail[0]
    if last in ",:" or first in "(#[":
        return False
    if first in "%,.:;)]/-" or last in "(/-#":
        return True
    if last.isdigit() or last == ".":
        return first.isdigit()
    if not (last.isalpha() and first.isalpha()):
        return False
    # bounded: labels are short, and a hostile word must not cost quadratic time
    end, start = _WORD_END.search(head[-32:]), _WORD_START.search(tail[:32])
    return end is not None and start is not None and f"{end[0]}{start[0]}" in _LABEL_WORDS


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
