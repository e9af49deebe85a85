"""`watch`'s windows against a real HTTP server whose counters advance by known steps
(tests/support/fake_metrics_server.py): tok/s, the running batch, acceptance length and
per-position acceptance from the deltas; "—" for a window without drafts; failed scrapes as
windows, and the watch going on through a server that stops, comes back restarted, or hangs.

The loop runs on a clock of the test's own (each sleep advances it), so a window's seconds are
exactly the interval and its rates exact; the scrapes themselves are real.
"""

from __future__ import annotations

from collections.abc import Generator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dflashops.bench.endpoint import Endpoint
from dflashops.watch.loop import WatchSettings, next_due, watch_windows
from dflashops.watch.reading import read_scrape
from dflashops.watch.scraper import MetricsScraper
from dflashops.watch.text import MISSING, window_line
from dflashops.watch.window import (
    FIRST_READING,
    NO_METRICS,
    NO_NEW_DRAFTS,
    RESTARTED,
    WatchWindow,
)
from tests.support.fake_metrics_server import FakeMetricsServer, Step

INTERVAL_S = 2.0
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "metrics"


class FakeClock:
    """Monotonic seconds that move only when the loop sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def windows_of(
    server: FakeMetricsServer, count: int | None = None, timeout_s: float = 5.0
) -> Generator[WatchWindow]:
    clock = FakeClock()
    scraper = MetricsScraper(Endpoint(server.url), timeout_s=timeout_s, clock=clock)
    settings = WatchSettings(interval_s=INTERVAL_S, count=count, timeout_s=timeout_s)
    with scraper:
        yield from watch_windows(scraper, settings, clock=clock, sleep=clock.sleep)


def test_windows_from_known_deltas() -> None:
    steps = [
        Step(),  # the first scrape: where window 1 begins
        Step(generation_tokens=200, drafts=50, accepted_per_position=(45, 35, 20, 10), running=4),
        Step(
            generation_tokens=300,
            drafts=0,
            accepted_per_position=(0, 0, 0, 0),
            running=2,
            waiting=3,
        ),
        Step(generation_tokens=100, drafts=25, accepted_per_position=(25, 20, 10, 5), running=1),
    ]
    with FakeMetricsServer(steps) as server:
        first, idle, third = list(windows_of(server, count=3))
        assert server.scrapes == 4
    assert [w.window for w in (first, idle, third)] == [1, 2, 3]
    assert first.error is None and first.duration == INTERVAL_S
    assert first.output_throughput == 100.0  # 200 tokens / 2 s
    assert (first.num_requests_running, first.num_requests_waiting) == (4, 0)
    assert first.spec_decode_source == "metrics"
    assert first.spec_decode_num_drafts == 50
    assert first.spec_decode_draft_tokens == 200
    assert first.spec_decode_accepted_tokens == 110
    assert first.spec_decode_acceptance_length == pytest.approx(1 + 110 / 50)
    assert first.spec_decode_acceptance_rate == pytest.approx(55.0)  # percent, as vllm bench
    assert first.spec_decode_per_position_acceptance_rates == pytest.approx([0.9, 0.7, 0.4, 0.2])
    assert first.notes == []

    assert idle.output_throughput == 150.0
    assert (idle.num_requests_running, idle.num_requests_waiting) == (2, 3)
    assert idle.spec_decode_num_drafts == 0
    assert idle.spec_decode_acceptance_length is None  # no drafts: no acceptance, not 0
    assert idle.spec_decode_per_position_acceptance_rates is None
    assert idle.notes == [NO_NEW_DRAFTS]

    assert third.output_throughput == 50.0
    assert third.spec_decode_acceptance_length == pytest.approx(1 + 60 / 25)
    assert third.spec_decode_per_position_acceptance_rates == pytest.approx([1.0, 0.8, 0.4, 0.2])


def test_a_window_in_words_shows_a_dash_where_nothing_was_drafted() -> None:
    steps = [Step(), Step(drafts=0, accepted_per_position=(0, 0, 0, 0), running=2)]
    with FakeMetricsServer(steps) as server:
        (window,) = windows_of(server, count=1)
    line = window_line(window)
    assert f"accept len {MISSING}, per position {MISSING}, drafts 0" in line
    assert "100.0 tok/s out, running 2, waiting 0" in line
    assert line.endswith(f"({NO_NEW_DRAFTS})")
    assert line.startswith("#1 ")


def test_json_keys_are_vllm_bench_serves_where_they_overlap() -> None:
    with FakeMetricsServer() as server:
        (window,) = windows_of(server, count=1)
    data = window.model_dump(mode="json")
    for key in (
        "output_throughput",
        "spec_decode_acceptance_length",
        "spec_decode_acceptance_rate",
        "spec_decode_num_drafts",
        "spec_decode_draft_tokens",
        "spec_decode_accepted_tokens",
        "spec_decode_per_position_acceptance_rates",
        "duration",
    ):
        assert key in data
    assert data["time"].endswith("Z") or data["time"].endswith("+00:00")


def test_a_stopped_server_is_a_window_that_says_so_and_the_watch_goes_on() -> None:
    server = FakeMetricsServer().__enter__()
    port = int(server.url.rsplit(":", 1)[1])
    windows = windows_of(server)
    try:
        assert next(windows).error is None
        server.stop()
        gone = next(windows)
        assert gone.error is not None
        assert gone.error.startswith("no answer: connection refused at ")
        assert gone.error.endswith(f"127.0.0.1:{port}/metrics")
        assert gone.output_throughput is None and gone.num_requests_running is None
        assert window_line(gone).endswith("; trying again")
        still_gone = next(windows)
        assert still_gone.window == 3 and still_gone.error is not None
        # back on the same port, counters from scratch: the watch says so, then goes on
        with FakeMetricsServer(port=port) as again:
            back = next(windows)
            assert back.error is None
            assert back.notes == [RESTARTED]
            assert back.output_throughput is None and back.num_requests_running == 4
            steady = next(windows)
            assert again.scrapes == 2
        assert steady.output_throughput == 100.0 and steady.notes == []
    finally:
        windows.close()
        server.stop()


def test_a_server_down_at_the_start_is_the_first_window() -> None:
    server = FakeMetricsServer()
    server.stop()  # never started: its port refuses
    down, still = windows_of(server, count=2)
    assert down.window == 1 and "connection refused" in (down.error or "")
    assert still.window == 2 and still.error is not None


def test_a_scrape_that_hangs_times_out_and_the_watch_goes_on() -> None:
    with FakeMetricsServer(hang_from=2) as server:
        hung, again = windows_of(server, count=2, timeout_s=0.3)
    assert hung.error == f"timed out after 0.3 s at {server.url}/metrics"
    assert again.error is not None and again.window == 2


def test_sglang_metrics_give_throughput_and_batch_but_no_acceptance() -> None:
    with FakeMetricsServer(
        [Step(), Step(generation_tokens=500, running=8, waiting=2)], engine="sglang"
    ) as server:
        (window,) = windows_of(server, count=1)
    assert window.output_throughput == 250.0
    assert (window.num_requests_running, window.num_requests_waiting) == (8, 2)
    assert window.spec_decode_source is None and window.spec_decode_acceptance_length is None
    assert window.notes[0].startswith("no spec-decode counters in /metrics")


def test_a_server_without_metrics_is_said_once_per_window_not_an_error() -> None:
    with FakeMetricsServer(engine="none") as server:
        (window,) = windows_of(server, count=1)
    assert window.error is None
    assert window.notes == [NO_METRICS]
    assert window.output_throughput is None and window.duration is None


def test_the_first_good_reading_after_failures_begins_the_rates() -> None:
    server = FakeMetricsServer()
    server.stop()
    port = int(server.url.rsplit(":", 1)[1])
    windows = windows_of(server)
    try:
        assert next(windows).error is not None
        with FakeMetricsServer(port=port):
            first = next(windows)
            assert first.notes == [FIRST_READING] and first.num_requests_running == 4
            assert next(windows).output_throughput == 100.0
    finally:
        windows.close()


def test_scrapes_keep_their_pace() -> None:
    assert next_due(10.0, 2.0, 10.5) == 12.0  # on time: one interval after the last was due
    assert next_due(10.0, 2.0, 17.0) == 17.0  # a scrape ran long: the next one at once


def test_a_real_vllm_scrape_reads_as_a_reading() -> None:
    """vLLM 0.32.0's own exposition (tests/fixtures/metrics): the gauges by their exact names
    (not ``num_requests_waiting_by_reason``), the counters with their ``_total``."""
    text = (FIXTURES / "real-vllm-0.32.0-cpu-ngram.txt").read_text()
    reading = read_scrape(text, at_s=0.0, time=datetime.now(UTC))
    assert (reading.generation_tokens, reading.running, reading.waiting) == (832, 0, 0)
    assert reading.spec_decode and reading.counters is not None
    assert reading.counters.num_drafts == 164
    assert reading.counters.accepted_per_position == {0: 164, 1: 146, 2: 145, 3: 137}


def test_data_parallel_engines_are_summed() -> None:
    text = (FIXTURES / "synthesized-vllm-dp2.txt").read_text()
    reading = read_scrape(text, at_s=0.0, time=datetime.now(UTC))
    assert reading.counters is not None and reading.counters.num_drafts == 130
