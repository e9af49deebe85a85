"""The watch loop: a first scrape to begin from, then one window per interval until ``count``
windows were given (or forever).

Scrapes keep a fixed pace: each is due one interval after the last was due, so a slow scrape
does not push every later one back; one that ran past its successor's time starts the next at
once. A failed scrape is a window that says so, and the loop goes on: the next good reading is
measured from the last good one (a server back without a restart gives the rates of the whole
gap; one that restarted says so and begins again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from dflashops.watch.log_follow import LogFollower
from dflashops.watch.reading import Reading, ScrapeFailure
from dflashops.watch.scraper import DEFAULT_TIMEOUT_S
from dflashops.watch.window import WatchWindow, failed_window, make_window

DEFAULT_INTERVAL_S = 2.0


class Scraper(Protocol):
    url: str

    def scrape(self) -> Reading | ScrapeFailure: ...


@dataclass(frozen=True)
class WatchSettings:
    interval_s: float = DEFAULT_INTERVAL_S
    count: int | None = None
    """Windows to give before the loop ends; None: until interrupted."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """The longest one scrape may take."""


def watch_windows(
    scraper: Scraper,
    settings: WatchSettings,
    *,
    log: LogFollower | None = None,
    root: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[WatchWindow]:
    """Windows of ``scraper``'s server, one per ``settings.interval_s``; ``log`` adds the
    server log's lines where ``/metrics`` lacks a number; ``root`` names the server in each
    window (default: the scraped URL)."""
    url = root or scraper.url
    if log is not None:
        log.start()  # a log not found now is looked for again at each window
    due = clock()
    first = scraper.scrape()
    baseline = first if isinstance(first, Reading) else None
    number = 0
    if isinstance(first, ScrapeFailure):
        number += 1
        yield failed_window(number, url, first)
    while settings.count is None or number < settings.count:
        due = next_due(due, settings.interval_s, clock())
        sleep(max(0.0, due - clock()))
        scraped = scraper.scrape()
        numbers = log.window() if log is not None else None
        number += 1
        if isinstance(scraped, ScrapeFailure):
            yield failed_window(number, url, scraped)
            continue
        yield make_window(number, url, baseline, scraped, numbers)
        if scraped.exposes_metrics:
            baseline = scraped


def next_due(due: float, interval_s: float, now: float) -> float:
    """The next scrape's time: one interval after ``due``, or ``now`` when that has passed."""
    return max(due + interval_s, now)
