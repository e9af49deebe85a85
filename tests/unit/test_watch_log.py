"""SGLang under `watch`: its /metrics has no spec-decode counters, so the acceptance length of a
window comes from the server log's `Decode batch` lines written during it, read over a real SSH
connection (the loopback sshd) by byte offset, as `bench` reads a log; and `watch NAME` end to
end, the container being that sshd and its server the fake metrics server.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.bench.endpoint import Endpoint
from dflashops.bench.server_log import RemoteServerLog
from dflashops.cli import cli
from dflashops.lab.host_model import SshHost
from dflashops.remote import SshConnection
from dflashops.watch.log_follow import LogFollower
from dflashops.watch.loop import WatchSettings, watch_windows
from dflashops.watch.scraper import MetricsScraper
from dflashops.watch.window import NO_METRICS
from tests.support.fake_metrics_server import FakeMetricsServer, Step
from tests.support.ssh_hosts import connect_to

OLD = (
    "[2025-10-22 10:27:50 TP0] Decode batch. #running-req: 9, #token: 108, token usage: 0.00, "
    "accept len: 1.10, accept rate: 0.03, cuda graph: True, gen throughput (token/s): 9.00, "
    "#queue-req: 9, \n"
)


def decode_line(accept_len: float, throughput: float, running: int, queued: int = 0) -> str:
    return (
        f"[2025-10-22 10:27:57 TP0] Decode batch. #running-req: {running}, #token: 186, token "
        f"usage: 0.00, accept len: {accept_len:.2f}, cuda graph: True, gen throughput "
        f"(token/s): {throughput:.2f}, #queue-req: {queued}, \n"
    )


@pytest.fixture
def conn(loopback_host: SshHost) -> Iterator[SshConnection]:
    with connect_to(loopback_host) as connection:
        yield connection


def test_a_window_reads_the_lines_written_during_it_whole(
    conn: SshConnection, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    log.write_text(OLD)  # before the watch began: never counted
    follower = LogFollower(RemoteServerLog(conn, str(log)))
    assert follower.start() is None
    with log.open("a") as out:
        out.write(decode_line(2.50, 100.0, 4) + decode_line(2.20, 120.0, 3, queued=2))
    numbers = follower.window()
    assert numbers.error is None
    assert (numbers.stats_lines, numbers.spec_decode_lines) == (2, 2)
    assert numbers.acceptance_length == pytest.approx(2.35)
    assert numbers.generation_throughput == pytest.approx(110.0)
    assert (numbers.running, numbers.waiting) == (3, 2)  # the window's last line
    cut = decode_line(3.00, 90.0, 1)
    with log.open("a") as out:
        out.write(cut[:40])  # a line being written as the window ends: not read yet
    assert follower.window().spec_decode_lines == 0
    with log.open("a") as out:
        out.write(cut[40:])
    finished = follower.window()
    assert finished.spec_decode_lines == 1 and finished.acceptance_length == pytest.approx(3.0)


def test_a_log_that_is_not_there_is_said_each_window(conn: SshConnection, tmp_path: Path) -> None:
    follower = LogFollower(RemoteServerLog(conn, str(tmp_path / "absent.log")))
    assert follower.start() is not None
    numbers = follower.window()
    assert numbers.error is not None and "absent.log" in numbers.error
    (tmp_path / "absent.log").write_text(OLD)
    assert follower.window().error == f"{tmp_path / 'absent.log'}: found; read from the next window"
    assert follower.window().error is None


def test_sglang_windows_take_the_acceptance_length_from_the_log(
    conn: SshConnection, tmp_path: Path
) -> None:
    log = tmp_path / "server.log"
    log.write_text("")
    lines = iter([[decode_line(2.50, 100.0, 4), decode_line(3.00, 100.0, 4)], []])

    def sleep_and_log(_seconds: float) -> None:  # the server logs while the watch waits
        with log.open("a") as out:
            out.writelines(next(lines))

    steps = [Step(), Step(generation_tokens=400, running=4)]
    with FakeMetricsServer(steps, engine="sglang") as server:
        scraper = MetricsScraper(Endpoint(server.url))
        follower = LogFollower(RemoteServerLog(conn, str(log)))
        settings = WatchSettings(interval_s=0.01, count=2)
        with scraper:
            logged, silent = watch_windows(scraper, settings, log=follower, sleep=sleep_and_log)
    assert logged.spec_decode_source == "log"
    assert logged.spec_decode_acceptance_length == pytest.approx(2.75)
    assert logged.spec_decode_per_position_acceptance_rates is None  # SGLang prints none
    assert logged.num_requests_running == 4
    assert logged.notes == ["from the server log: acceptance length (mean of 2 lines)"]
    assert silent.spec_decode_acceptance_length is None
    assert silent.notes == [
        "no spec-decode counters in /metrics, no spec-decode line in the log this window"
    ]


def test_without_metrics_the_log_gives_every_number(conn: SshConnection, tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("")

    def sleep_and_log(_seconds: float) -> None:
        with log.open("a") as out:
            out.write(decode_line(2.00, 80.0, 2, queued=1) + decode_line(2.00, 120.0, 6))

    with (
        FakeMetricsServer(engine="none") as server,
        MetricsScraper(Endpoint(server.url)) as scraper,
    ):
        follower = LogFollower(RemoteServerLog(conn, str(log)))
        settings = WatchSettings(interval_s=0.01, count=1)
        (window,) = watch_windows(scraper, settings, log=follower, sleep=sleep_and_log)
    assert window.output_throughput == pytest.approx(100.0)
    assert (window.num_requests_running, window.num_requests_waiting) == (6, 0)
    assert window.spec_decode_acceptance_length == pytest.approx(2.0)
    assert window.notes == [
        NO_METRICS,
        "from the server log: output_throughput, num_requests_running, num_requests_waiting, "
        "acceptance length (mean of 2 lines)",
    ]


def test_watch_name_finds_the_server_and_its_log_as_bench_does(
    loopback_host: SshHost, tmp_path: Path
) -> None:
    if Path("/etc/dflashops/deployed.json").exists():
        pytest.skip("this machine has a deployed.json: the loopback container would read it")
    log = tmp_path / "server.log"
    log.write_text("")
    stop = threading.Event()

    def sglang_logs() -> None:
        while not stop.wait(0.05):
            with log.open("a") as out:
                out.write(decode_line(2.40, 100.0, 5))

    with FakeMetricsServer(engine="sglang") as server:
        port = server.url.rsplit(":", 1)[1]
        inventory = write_inventory(loopback_host, tmp_path)
        playbook = tmp_path / "sglang.yaml"
        playbook.write_text(
            "name: sglang-watch\ncontainer: ct-watch\nmodel: {path: /models/m, served_name: m}\n"
            f"engine: {{name: sglang, version: 0.5.2}}\nserver: {{device: cpu, port: {port}}}\n"
        )
        writer = threading.Thread(target=sglang_logs, daemon=True)
        writer.start()
        try:
            result = CliRunner().invoke(
                cli,
                [
                    *["-i", str(inventory), "watch", "ct-watch", "-p", str(playbook)],
                    *["--skip-pve-check", "--server-log", str(log), "--json"],
                    *["--count", "2", "--interval", "0.3"],
                ],
            )
        finally:
            stop.set()
            writer.join()
    assert result.exit_code == 0, result.output
    windows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(windows) == 2
    for window in windows:
        assert window["url"] == f"http://127.0.0.1:{port}"
        assert window["spec_decode_source"] == "log"
        assert window["spec_decode_acceptance_length"] == pytest.approx(2.40)
        assert window["num_requests_running"] == 4  # /metrics first, the log only where it lacks
    assert "no /etc/dflashops/deployed.json in the container" in result.stderr


def write_inventory(host: SshHost, tmp_path: Path) -> Path:
    ssh = f"user: {host.user}, key_file: {host.key_file}, known_hosts: {host.known_hosts}"
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "version: 1\n"
        "clusters:\n"
        "  lab:\n"
        "    api_url: https://127.0.0.1:8006\n"
        "    auth: {user: root@pam, password: {env: UNUSED_PVE_PASSWORD}}\n"
        "    nodes: {lab: {}}\n"
        "containers:\n"
        f"  ct-watch: {{vmid: 903, network: {{ip: 127.0.0.1/8}}, ssh: {{host: 127.0.0.1, "
        f"port: {host.port}, {ssh}}}}}\n"
    )
    return path
