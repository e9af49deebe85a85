"""``GET /metrics`` once per window, bounded by a timeout, and whatever happens a value: a
``Reading``, or a ``ScrapeFailure`` that says what failed (refused, timed out, an error reply,
a document that does not parse). A watch outlives the server it watches.

Every scrape opens a fresh connection: a kept-alive one that the server closed between two
scrapes would read as a failure that is none, and one connection per refresh costs nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx

from dflashops.bench.endpoint import Endpoint, connection_failure, error_body_text
from dflashops.errors import DflashopsError, shorten
from dflashops.watch.reading import Reading, ScrapeFailure, no_metrics, read_scrape

DEFAULT_TIMEOUT_S = 5.0
METRICS_PATH = "/metrics"
MAX_MESSAGE_CHARS = 300


def utc_now() -> datetime:
    return datetime.now(UTC)


class MetricsScraper:
    """Scrapes ``endpoint``'s ``/metrics``; a context manager (it owns an HTTP client)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = utc_now,
    ) -> None:
        self.endpoint = endpoint
        self.url = endpoint.url(METRICS_PATH)
        self.timeout_s = timeout_s
        self._clock, self._wall = clock, wall
        self._client = httpx.Client(
            headers=endpoint.headers(),
            timeout=httpx.Timeout(timeout_s),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=0),
        )

    def __enter__(self) -> MetricsScraper:
        return self

    def __exit__(self, *exc: object) -> None:
        self._client.close()

    def scrape(self) -> Reading | ScrapeFailure:
        sent = self._clock()
        try:
            response = self._client.get(self.url)
        except httpx.TimeoutException:
            return self._failed(f"timed out after {self.timeout_s:g} s at {self.url}")
        except httpx.HTTPError as exc:
            return self._failed(f"no answer: {connection_failure(exc)} at {self.url}")
        at_s, at = (sent + self._clock()) / 2, self._wall()
        if response.status_code == 404:
            return no_metrics(at_s=at_s, time=at)
        if response.status_code != 200:
            body = error_body_text(response.content) or response.reason_phrase
            return self._failed(f"HTTP {response.status_code} at {self.url}: {body}")
        try:
            return read_scrape(response.text, at_s=at_s, time=at)
        except DflashopsError as exc:
            return self._failed(f"{self.url}: not a metrics document: {exc.one_line()}")

    def _failed(self, message: str) -> ScrapeFailure:
        # a reply's body is the server's text: one line, its control characters escaped
        return ScrapeFailure(time=self._wall(), message=shorten(message, MAX_MESSAGE_CHARS))
