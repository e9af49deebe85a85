"""`dflashops watch` as an operator runs it: `--json` lines, one line per window in a pipe, a
live table on a terminal; a server killed mid-watch, and Ctrl-C, against real processes.

The servers are tests/support/fake_metrics_server.py: in a thread of the test for CliRunner, as
its own process where the test kills it by pid.
"""

from __future__ import annotations

import json
import os
import pty
import queue
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from tests.support.fake_metrics_server import FakeMetricsServer, Step

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 30.0


def test_json_prints_exactly_count_objects_and_nothing_else() -> None:
    with FakeMetricsServer() as server:
        result = CliRunner().invoke(
            cli, ["watch", "--url", server.url, "--json", "--count", "3", "--interval", "0.1"]
        )
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert len(lines) == 3
    windows = [json.loads(line) for line in lines]
    assert [w["window"] for w in windows] == [1, 2, 3]
    for window in windows:
        assert window["error"] is None and window["url"] == server.url
        assert window["output_throughput"] == pytest.approx(200 / window["duration"])
        assert window["num_requests_running"] == 4
        assert window["spec_decode_acceptance_length"] == pytest.approx(3.2)
        assert window["spec_decode_per_position_acceptance_rates"] == pytest.approx(
            [0.9, 0.7, 0.4, 0.2]
        )


def test_a_pipe_gets_one_line_per_window() -> None:
    steps = [Step(), Step(), Step(drafts=0, accepted_per_position=(0, 0, 0, 0))]
    with FakeMetricsServer(steps) as server:
        result = CliRunner().invoke(
            cli, ["watch", "--url", server.url, "--count", "2", "--interval", "0.1"]
        )
    assert result.exit_code == 0, result.output
    first, second = result.stdout.splitlines()
    assert first.startswith("#1 ") and "accept len 3.20, per position 0.90 0.70 0.40 0.20" in first
    assert "drafts 50" in first
    assert second.startswith("#2 ") and "accept len —, per position —, drafts 0" in second
    assert result.stderr == f"watch {server.url} every 0.1 s\n"


def test_a_pipe_in_an_ascii_locale_gets_ascii_dashes() -> None:
    steps = [Step(), Step(drafts=0, accepted_per_position=(0, 0, 0, 0))]
    with FakeMetricsServer(steps) as server:
        result = CliRunner().invoke(
            cli,
            ["watch", "--url", server.url, "--count", "1", "--interval", "0.1"],
            env={"LC_ALL": "C"},
        )
    assert result.exit_code == 0, result.output
    assert "accept len -, per position -, drafts 0" in result.stdout
    assert result.stdout.isascii()


def test_a_reader_that_goes_away_ends_it_with_0() -> None:
    """`dflashops watch … | head -1`: the first write after the reader left ends the watch."""
    with FakeMetricsServer() as server:
        for mode in (["--json"], []):
            watcher = start_watch(["--url", server.url, "--interval", "0.1", *mode])
            try:
                LineReader(watcher, close_after_first=True).next()
                assert watcher.wait(timeout=WAIT_S) == 0
            finally:
                stop(watcher)
            assert watcher.stderr is not None
            assert b"Traceback" not in watcher.stderr.read()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--url", "localhost:8000"],
        ["gpu1", "--url", "http://127.0.0.1:9"],
        ["--url", "http://x", "-p", "lab"],
    ],
)
def test_name_or_url_is_a_usage_error_otherwise(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["watch", *args])
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_a_server_killed_mid_watch_is_said_and_count_still_ends_it(tmp_path: Path) -> None:
    server = start_server_process(tmp_path / "events")
    watcher = start_watch(["--url", server.url, "--json", "--count", "5", "--interval", "0.3"])
    try:
        lines = LineReader(watcher)
        before = [json.loads(lines.next()) for _ in range(2)]
        server.kill()
        after = [json.loads(lines.next()) for _ in range(3)]
        assert watcher.wait(timeout=WAIT_S) == 0
        assert lines.rest() == []
    finally:
        stop(watcher)
        server.kill()
    assert [w["error"] for w in before] == [None, None]
    assert before[1]["output_throughput"] > 0
    for window in after:
        assert window["error"] == f"no answer: connection refused at {server.url}/metrics"
        assert window["output_throughput"] is None
    assert [w["window"] for w in before + after] == [1, 2, 3, 4, 5]
    assert watcher.stderr is not None and watcher.stderr.read() == b""


@pytest.mark.parametrize("mode", [["--json"], []], ids=["json", "pipe"])
def test_ctrl_c_ends_it_with_exit_0_and_no_traceback(mode: list[str]) -> None:
    with FakeMetricsServer() as server:
        watcher = start_watch(["--url", server.url, "--interval", "0.2", *mode])
        try:
            LineReader(watcher).next()
            watcher.send_signal(signal.SIGINT)
            assert watcher.wait(timeout=WAIT_S) == 0
        finally:
            stop(watcher)
    assert watcher.stderr is not None
    errors = watcher.stderr.read().decode()
    assert "Traceback" not in errors and "Aborted" not in errors


def test_ctrl_c_during_a_hung_scrape_ends_it_too() -> None:
    with FakeMetricsServer(hang_from=2) as server:
        watcher = start_watch(
            ["--url", server.url, "--json", "--timeout", "60", "--interval", "0.1"]
        )
        try:
            deadline = time.monotonic() + WAIT_S
            while server.scrapes < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert server.scrapes == 2  # the second scrape hangs: watch waits in its request
            watcher.send_signal(signal.SIGINT)
            assert watcher.wait(timeout=WAIT_S) == 0
        finally:
            stop(watcher)
    assert watcher.stderr is not None and b"Traceback" not in watcher.stderr.read()


def test_a_terminal_gets_a_live_table_and_is_restored_on_ctrl_c() -> None:
    with FakeMetricsServer() as server:
        primary, secondary = pty.openpty()
        env = {**os.environ, "TERM": "xterm", "COLUMNS": "160", "LINES": "40"}
        watcher = subprocess.Popen(
            [sys.executable, "-m", "dflashops", "watch", "--url", server.url, "--interval", "0.2"],
            cwd=ROOT,
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            env=env,
        )
        os.close(secondary)
        try:
            screen = read_until(primary, b"3.20", watcher)
            watcher.send_signal(signal.SIGINT)
            assert watcher.wait(timeout=WAIT_S) == 0
            screen += read_rest(primary)
        finally:
            stop(watcher)
            os.close(primary)
    text = screen.decode(errors="replace")
    assert "out tok/s" in text and "per position" in text and "0.90 0.70 0.40 0.20" in text
    assert "\x1b[?25l" in text  # the live display hid the cursor ...
    assert text.rindex("\x1b[?25h") > text.rindex("\x1b[?25l")  # ... and showed it again
    assert "Traceback" not in text


# --- processes ---------------------------------------------------------------------------------


class ServerProcess:
    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process, self.port = process, port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=WAIT_S)


def start_server_process(events: Path) -> ServerProcess:
    argv = [sys.executable, "-m", "tests.support.fake_metrics_server", "--events", str(events)]
    process = subprocess.Popen(argv, cwd=ROOT)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        lines = events.read_text().splitlines() if events.exists() else []
        if lines and lines[0].startswith("listening "):
            return ServerProcess(process, int(lines[0].split()[1]))
        assert process.poll() is None, f"the fake server exited {process.returncode}"
        time.sleep(0.02)
    process.kill()
    raise AssertionError(f"the fake server did not listen within {WAIT_S} s")


def start_watch(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "dflashops", "watch", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait(timeout=WAIT_S)


class LineReader:
    """A process's stdout lines, each waited for with a deadline (a thread reads them)."""

    def __init__(
        self, process: subprocess.Popen[bytes], *, close_after_first: bool = False
    ) -> None:
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.close_after_first = close_after_first
        assert process.stdout is not None
        self.thread = threading.Thread(target=self._read, args=(process,), daemon=True)
        self.thread.start()

    def _read(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdout is not None
        for line in iter(process.stdout.readline, b""):
            self.lines.put(line)
            if self.close_after_first:
                process.stdout.close()  # as `head -1` does
                break
        self.lines.put(None)

    def next(self) -> str:
        line = self.lines.get(timeout=WAIT_S)
        assert line is not None, "stdout ended"
        return line.decode()

    def rest(self) -> list[str]:
        self.thread.join(timeout=WAIT_S)
        return [line.decode() for line in iter(self.lines.get_nowait, None)]


def read_until(fd: int, wanted: bytes, process: subprocess.Popen[bytes]) -> bytes:
    seen = b""
    deadline = time.monotonic() + WAIT_S
    while wanted not in seen:
        assert time.monotonic() < deadline, f"no {wanted!r} on the terminal: {seen[-400:]!r}"
        assert process.poll() is None, f"watch exited {process.returncode}: {seen[-400:]!r}"
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            seen += os.read(fd, 65536)
    return seen


def read_rest(fd: int) -> bytes:
    rest = b""
    for _ in iter_ready(fd):
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the terminal's other end closed: everything was read
            break
        if not chunk:
            break
        rest += chunk
    return rest


def iter_ready(fd: int) -> Iterator[None]:
    while select.select([fd], [], [], 0.5)[0]:
        yield None
