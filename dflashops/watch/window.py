"""One watch window: what happened between two readings (pure arithmetic, no I/O).

Rates come from counter deltas over the seconds between the two scrapes; the running batch is
the gauge at the window's end. Spec-decode acceptance is computed as ``bench`` computes it
(``metrics.spec_decode.delta``); where ``/metrics`` has no spec-decode counters the log's lines
of the window stand in. A number the window cannot tell is None ("—" on screen), never 0: a
window without new drafts has no acceptance, not an acceptance of zero.

The JSON keys are ``vllm bench serve``'s where they mean the same (``output_throughput``,
``spec_decode_acceptance_length``, ``spec_decode_acceptance_rate`` in percent, …).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dflashops.errors import BenchmarkError
from dflashops.metrics.spec_decode import SpecDecodeDelta, delta
from dflashops.watch.log_follow import LogNumbers
from dflashops.watch.reading import Reading, ScrapeFailure

FIRST_READING = "first reading: rates from the next window"
RESTARTED = "counters went backwards: the server restarted; rates from the next window"
NO_NEW_DRAFTS = "no new drafts"
NO_METRICS = "the server has no /metrics (SGLang serves it with --enable-metrics)"


class WatchWindow(BaseModel):
    """One refresh of ``dflashops watch``; ``--json`` prints each as one line."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: int
    """1, 2, … in the order shown."""
    time: datetime
    """UTC, when the window ended (its scrape)."""
    duration: float | None = None
    """Seconds between the window's two scrapes; None without a first one."""
    url: str
    error: str | None = None
    """The scrape failed: what failed, and where. Every number is then None."""
    output_throughput: float | None = None
    """Generated tokens per second over the window."""
    generation_tokens: int | None = None
    num_requests_running: int | None = None
    num_requests_waiting: int | None = None
    spec_decode_source: Literal["metrics", "log"] | None = None
    spec_decode_acceptance_length: float | None = None
    spec_decode_acceptance_rate: float | None = None
    """Accepted draft tokens / drafted tokens, in percent (as ``vllm bench serve``)."""
    spec_decode_num_drafts: int | None = None
    spec_decode_draft_tokens: int | None = None
    spec_decode_accepted_tokens: int | None = None
    spec_decode_per_position_acceptance_rates: list[float] | None = None
    notes: list[str] = []
    """Why a number is missing, and where numbers came from when not from /metrics."""


def failed_window(number: int, url: str, failure: ScrapeFailure) -> WatchWindow:
    return WatchWindow(window=number, time=failure.time, url=url, error=failure.message)


def make_window(
    number: int,
    url: str,
    before: Reading | None,
    after: Reading,
    log: LogNumbers | None = None,
) -> WatchWindow:
    """The window from ``before`` (the last good reading, None when there was none) to
    ``after``; ``log`` is what the server log said over it (None: no log is read)."""
    notes: list[str] = []
    fields: dict[str, object] = {"window": number, "time": after.time, "url": url}
    counted = _counted(before, after, notes)
    if counted is not None:
        generated, spec = counted
        fields["duration"] = duration = after.at_s - before.at_s if before else None
        fields["generation_tokens"] = generated
        if generated is not None and duration:
            fields["output_throughput"] = generated / duration
        if spec is not None and after.spec_decode:
            fields |= _from_counters(spec, notes)
    fields["num_requests_running"] = after.running
    fields["num_requests_waiting"] = after.waiting
    if not after.exposes_metrics:
        notes.append(NO_METRICS)
    if log is not None:
        fields |= _from_log(fields, after, log, notes)
    elif not after.spec_decode and after.exposes_metrics:
        notes.append(
            "no spec-decode counters in /metrics (not speculating, or SGLang: `watch NAME` "
            "reads its log)"
        )
    return WatchWindow.model_validate({**fields, "notes": notes})


def _counted(
    before: Reading | None, after: Reading, notes: list[str]
) -> tuple[int | None, SpecDecodeDelta | None] | None:
    """The generated tokens and spec-decode delta over the window; None (and a note) when the
    window has no first reading or the counters were reset."""
    if not after.exposes_metrics:
        return None
    if before is None or not before.exposes_metrics:
        notes.append(FIRST_READING)
        return None
    generated = None
    if before.generation_tokens is not None and after.generation_tokens is not None:
        generated = after.generation_tokens - before.generation_tokens
    spec = None
    try:
        if before.counters is not None and after.counters is not None:
            spec = delta(before.counters, after.counters)
    except BenchmarkError:  # a spec-decode counter went backwards
        restarted = True
    else:
        restarted = generated is not None and generated < 0
    if restarted:
        notes.append(RESTARTED)
        return None
    return generated, spec


def _from_counters(spec: SpecDecodeDelta, notes: list[str]) -> dict[str, object]:
    keys = spec.vllm_bench_keys()
    if not spec.num_drafts:
        notes.append(NO_NEW_DRAFTS)
        keys["spec_decode_per_position_acceptance_rates"] = None
    return {"spec_decode_source": "metrics", **keys}


def _from_log(
    fields: dict[str, object], after: Reading, log: LogNumbers, notes: list[str]
) -> dict[str, object]:
    """What the log adds: every number /metrics did not give."""
    if log.error is not None:
        notes.append(f"server log: {log.error}")
    if log.rotated:
        notes.append("server log: it shrank (rotated or truncated); read from its start")
    added: dict[str, object] = {}
    from_log = []
    for key, value in (
        ("output_throughput", log.generation_throughput),
        ("num_requests_running", log.running),
        ("num_requests_waiting", log.waiting),
    ):
        if fields.get(key) is None and value is not None:
            added[key] = value
            from_log.append(key)
    if not after.spec_decode and log.acceptance_length is not None:
        added |= {
            "spec_decode_source": "log",
            "spec_decode_acceptance_length": log.acceptance_length,
            "spec_decode_acceptance_rate": log.acceptance_rate_pct,
        }
        from_log.append(f"acceptance length (mean of {log.spec_decode_lines} lines)")
    elif not after.spec_decode and log.error is None:
        notes.append(
            "no spec-decode counters in /metrics, no spec-decode line in the log this window"
        )
    if from_log:
        notes.append(f"from the server log: {', '.join(from_log)}")
    return added
