"""`bench` when its server dies mid-run (issue 32): a real server process is killed by pid
during the second concurrency level.

What was measured is kept and written: the first level whole, the second marked incomplete with
its failed requests, the third never run; the command exits 1 with one line saying the server
stopped answering, and ``--json`` still prints one document. Once the server is back, the very
same command succeeds. A server that dies at a ``/metrics`` scrape (after a level, or before
one) is the same stop, one step later or earlier.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import BenchReport
from dflashops.bench.runner import run_benchmark_sync
from dflashops.bench.settings import BenchSettings
from dflashops.bench.stopped import BenchInterrupted
from dflashops.bench.workload import load_workload
from dflashops.cli import cli
from dflashops.errors import TuneInputError
from dflashops.tune.source import run_from_report

ROOT = Path(__file__).resolve().parents[2]
LEVELS = "1,2,4"
REQUESTS = 6
# POSTs: the warm-up and 6 requests of c=1 (1-7), the warm-up of c=2 (8), its requests from 9:
# 9 and 10 complete, 11 and 12 (sent as they finish) hang until the kill
HANG_FROM = 11
WAIT_S = 15.0


@dataclass
class FakeServer:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=WAIT_S)


def start_server(events: Path, *options: str, port: int = 0) -> FakeServer:
    events.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "tests.support.fake_openai_server", "--events", str(events)]
    argv += ["--port", str(port), *options]
    process = subprocess.Popen(argv, cwd=ROOT)
    line = wait_for_event(events, "listening ", process)
    return FakeServer(process, int(line.split()[1]))


def wait_for_event(events: Path, prefix: str, process: subprocess.Popen[bytes]) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        lines = events.read_text().splitlines() if events.exists() else []
        found = [line for line in lines if line.startswith(prefix)]
        if found:
            return found[0]
        assert process.poll() is None, f"the fake server exited {process.returncode}"
        time.sleep(0.02)
    raise AssertionError(f"no {prefix!r} event from the fake server within {WAIT_S} s")


def bench_command(url: str, out: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "dflashops", "bench", "--url", url, "-c", LEVELS),
        *("-n", str(REQUESTS), "--warmup", "1", "--out", str(out), "--json"),
    ]


def test_bench_keeps_what_it_measured_when_the_server_is_killed(tmp_path: Path) -> None:
    events, out = tmp_path / "events.log", tmp_path / "bench.json"
    server = start_server(events, "--hang-from", str(HANG_FROM))
    try:
        command = bench_command(server.url, out)
        run = subprocess.Popen(
            command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        wait_for_event(events, f"hanging {HANG_FROM + 1}", server.process)
        server.kill()
        stdout, stderr = run.communicate(timeout=WAIT_S)
    finally:
        server.kill()

    assert run.returncode == 1, stderr.decode()
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: the server stopped answering during level c=2:"), lines[0]
    assert f"connection refused at {server.url}/" in lines[0]
    assert f"in {out}" in lines[0]  # the hint names the file with what was measured
    (document,) = json.loads(stdout)["reports"]  # one JSON document on stdout
    assert document["path"] == str(out)

    report = BenchReport.load(out)
    first, second = report.levels  # c=4 never ran
    assert (first.max_concurrency, first.completed, first.failed) == (1, REQUESTS, 0)
    assert not first.incomplete and first.spec_decode_acceptance_length == 3.0
    assert second.max_concurrency == 2 and second.incomplete
    assert second.completed == 2 and second.failed > 0
    assert second.completed + second.failed + second.not_sent == REQUESTS
    assert report.stopped is not None and report.stopped.levels_not_run == [4]
    assert report.stopped.message in lines[0]
    assert [lv["incomplete"] for lv in document["levels"]] == [False, True]

    shown = CliRunner().invoke(
        cli, ["report", str(out), "--plots", str(tmp_path / "plots")], env={"COLUMNS": "200"}
    )
    assert shown.exit_code == 0, shown.output
    assert "2 (incomplete)" in shown.output
    assert "the server stopped answering during level c=2" in shown.output
    assert (tmp_path / "plots" / "throughput_by_concurrency.png").is_file()

    # the server is back on the same port: the plain rerun of the same command converges
    back = start_server(events, port=server.port)
    try:
        rerun = subprocess.run(
            command, check=False, cwd=tmp_path, capture_output=True, timeout=WAIT_S
        )
    finally:
        back.kill()
    assert rerun.returncode == 0, rerun.stderr.decode()
    assert rerun.stderr == b""
    whole = BenchReport.load(out)
    assert [lv.max_concurrency for lv in whole.levels] == [1, 2, 4]
    assert all(lv.completed == REQUESTS and not lv.incomplete for lv in whole.levels)
    assert whole.stopped is None


@pytest.mark.parametrize(
    ("scrape", "phase"),
    [
        # scrapes 1-2 settle the counters before c=1, 3 is the first after it: the level's
        # requests stand, its counters are lost
        (3, "after"),
        # 5 is the first before c=2, after its warm-up: nothing of c=2 was measured
        (5, "before"),
    ],
)
def test_a_server_that_dies_at_a_metrics_scrape(tmp_path: Path, scrape: int, phase: str) -> None:
    server = start_server(tmp_path / "events.log", "--die-on-scrape", str(scrape))
    settings = BenchSettings(
        workload=load_workload("smoke"), concurrency=(1, 2, 4), requests=REQUESTS
    )
    try:
        with pytest.raises(BenchInterrupted) as caught:
            run_benchmark_sync(Endpoint(server.url), settings)
    finally:
        server.kill()
    report = caught.value.report
    assert report.stopped is not None
    assert report.stopped.phase == phase
    assert report.stopped.error == f"connection refused at {server.url}/metrics"
    assert report.stopped.levels_not_run == [2, 4]
    assert caught.value.message == report.stopped.message
    assert report.stopped.message.startswith(f"the server stopped answering {phase} level c=")
    (level,) = report.levels
    assert (level.max_concurrency, level.completed, level.failed) == (1, REQUESTS, 0)
    assert level.incomplete == (phase == "after")
    assert (level.spec_decode_acceptance_length is None) == (phase == "after")
    if phase == "after":  # an incomplete concurrency-1 level is no single-stream measurement
        config = report.config.model_copy(update={"method": "dflash", "num_speculative_tokens": 4})
        with pytest.raises(TuneInputError, match="concurrency-1 level is incomplete"):
            run_from_report(report.model_copy(update={"config": config}), "killed.json")
