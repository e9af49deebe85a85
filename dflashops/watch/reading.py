"""One ``/metrics`` scrape, reduced to what a watch window needs: the generated-tokens counter,
the running and waiting gauges, and the spec-decode counters.

vLLM names them ``vllm:generation_tokens_total``, ``vllm:num_requests_running`` and
``vllm:num_requests_waiting``; SGLang (``--enable-metrics``) ``sglang:generation_tokens_total``,
``sglang:num_running_reqs`` and ``sglang:num_queue_reqs``, and exposes no spec-decode counters.
Series are summed over engines (data-parallel ranks), as ``spec_decode`` sums its counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from dflashops.errors import ParseError
from dflashops.metrics.prometheus import Scrape
from dflashops.metrics.spec_decode import SpecDecodeCounters

GENERATION_TOKENS = ("vllm:generation_tokens", "sglang:generation_tokens")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")


@dataclass(frozen=True)
class Reading:
    """What one scrape said, and when.

    ``at_s`` is on the watcher's monotonic clock (the middle of the request: the server read
    its counters somewhere in between); ``time`` is the same instant in UTC, for people.
    ``exposes_metrics`` is False when the server answered but has no ``/metrics`` (SGLang
    without ``--enable-metrics``): every number is then None."""

    at_s: float
    time: datetime
    exposes_metrics: bool
    generation_tokens: int | None = None
    running: int | None = None
    waiting: int | None = None
    counters: SpecDecodeCounters | None = None

    @property
    def spec_decode(self) -> bool:
        """Whether the server exposes spec-decode counters (vLLM speculating)."""
        return self.counters is not None and self.counters.spec_decode


@dataclass(frozen=True)
class ScrapeFailure:
    """A scrape that got no usable answer: ``message`` says what failed, and where."""

    time: datetime
    message: str


def read_scrape(text: str, *, at_s: float, time: datetime) -> Reading:
    """The reading of one exposition; ``ParseError`` when it is not one."""
    scrape = Scrape.parse(text)
    return Reading(
        at_s=at_s,
        time=time,
        exposes_metrics=True,
        generation_tokens=_whole(_first_counter(scrape, GENERATION_TOKENS)),
        running=_whole(_first_total(scrape, RUNNING)),
        waiting=_whole(_first_total(scrape, WAITING)),
        counters=SpecDecodeCounters.from_scrape(scrape),
    )


def no_metrics(*, at_s: float, time: datetime) -> Reading:
    """The reading of a server that answers but serves no ``/metrics``."""
    return Reading(at_s=at_s, time=time, exposes_metrics=False)


def _first_counter(scrape: Scrape, bases: tuple[str, ...]) -> float | None:
    # prometheus_client writes a counter as "<name>_total"; another exporter may not
    return _first_total(scrape, tuple(name for base in bases for name in (f"{base}_total", base)))


def _first_total(scrape: Scrape, names: tuple[str, ...]) -> float | None:
    for name in names:
        value = scrape.total(name)
        if value is not None:
            return value
    return None


def _whole(value: float | None) -> int | None:
    if value is None:
        return None
    if not math.isfinite(value):
        raise ParseError(f"a counter or gauge reads {value}, not a count")
    return round(value)
