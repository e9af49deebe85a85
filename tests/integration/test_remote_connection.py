"""SshConnection against real sshd hosts: errors with context, host keys, deadlines, retries."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dflashops.errors import RemoteCommandError, RemoteError
from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.host_network import HostNetwork
from dflashops.lab.sshd import known_hosts_name
from dflashops.remote import (
    HostKeyError,
    RemoteConnectError,
    RemoteDeadlineError,
)
from tests.support.faults import cut_link, kill_host, restore_link
from tests.support.ssh_hosts import HostFactory, connect_to

pytestmark = pytest.mark.timeout(120)

# Time a deadline may overrun: thread hand-off plus closing the transport.
SLACK_S = 1.0


@pytest.mark.root
def test_run_returns_output_from_the_host(netns_hosts: list[SshHost]) -> None:
    h1, h2 = netns_hosts
    with connect_to(h1) as c1, connect_to(h2) as c2:
        first = c1.run("hostname; cat /proc/sys/kernel/hostname >&2")
        second = c2.run("hostname")
    assert (first.stdout.strip(), first.stderr.strip(), first.exit_code) == (h1.name, h1.name, 0)
    assert second.stdout.strip() == h2.name


@pytest.mark.root
def test_failed_command_error_carries_host_command_exit_code_and_stderr(
    netns_hosts: list[SshHost],
) -> None:
    command = "echo progress; echo 'disk full' >&2; echo 'giving up' >&2; exit 3"
    with connect_to(netns_hosts[0]) as conn, pytest.raises(RemoteCommandError) as caught:
        conn.run(command)
    error = caught.value
    assert (error.host, error.command, error.exit_code) == (netns_hosts[0].name, command, 3)
    assert "disk full" in error.stderr and "giving up" in error.stderr
    line = error.one_line()
    assert netns_hosts[0].name in line and "exited 3" in line and "giving up" in line


@pytest.mark.root
def test_expected_exit_codes_are_answers_not_errors(netns_hosts: list[SshHost]) -> None:
    with connect_to(netns_hosts[0]) as conn:
        absent = conn.run("test -e /srv/nothing-here", ok_codes=(0, 1))
        probed = conn.probe("exit 42")
        with pytest.raises(RemoteCommandError) as caught:
            conn.run("exit 2", ok_codes=(0, 1))
    assert absent.exit_code == 1 and not absent.ok
    assert probed.exit_code == 42
    assert caught.value.exit_code == 2


@pytest.mark.root
def test_stdin_reaches_the_command(netns_hosts: list[SshHost]) -> None:
    with connect_to(netns_hosts[0]) as conn:
        counted = conn.run("wc -l", stdin="a\nb\nc\n")  # ends only if stdin is closed
        echoed = conn.run("tr a-z A-Z", stdin="shout\n")
    assert counted.stdout.strip() == "3"
    assert echoed.stdout == "SHOUT\n"


@pytest.mark.root
def test_unknown_host_key_is_rejected_by_default(
    netns_hosts: list[SshHost], tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    conn = connect_to(netns_hosts[0], known_hosts=empty)
    started = time.monotonic()
    with pytest.raises(HostKeyError) as caught:
        conn.run("true")
    assert time.monotonic() - started < 5  # not retried
    assert "not in" in caught.value.message and str(empty) in caught.value.message
    assert empty.read_text() == ""


@pytest.mark.root
def test_accept_new_records_the_key_which_then_verifies(
    netns_hosts: list[SshHost], tmp_path: Path
) -> None:
    host = netns_hosts[0]
    known = tmp_path / "ssh" / "known_hosts"  # the directory does not exist yet
    with connect_to(host, known_hosts=known, accept_new_host_key=True) as conn:
        assert conn.run("hostname").stdout.strip() == host.name
    recorded = known.read_text().split()
    expected = host.known_hosts.read_text().split()
    assert recorded == expected  # the same name, key type and key as the host's own file
    with connect_to(host, known_hosts=known) as conn:  # verification on, no new key needed
        assert conn.run("true").ok
    assert known.read_text().split() == expected  # nothing appended the second time


@pytest.mark.root
def test_changed_host_key_is_refused_even_when_accepting_new_keys(
    netns_hosts: list[SshHost], tmp_path: Path
) -> None:
    h1, h2 = netns_hosts
    # h2's real key filed under h1's name: to the client, h1's key has changed
    _, key_type, key = h2.known_hosts.read_text().split()
    forged = tmp_path / "known_hosts"
    forged.write_text(f"{known_hosts_name(h1.address, h1.port)} {key_type} {key}\n")
    before = forged.read_text()
    conn = connect_to(h1, known_hosts=forged, accept_new_host_key=True)
    with pytest.raises(HostKeyError) as caught:
        conn.run("true")
    assert "does not match" in caught.value.message
    assert forged.read_text() == before


@pytest.mark.root
def test_wrong_client_key_fails_authentication_without_retries(
    netns_hosts: list[SshHost],
) -> None:
    h1, h2 = netns_hosts
    if h1.key_file == h2.key_file:
        pytest.skip("hosts share a client key")
    conn = connect_to(h1, key_file=h2.key_file, connect_attempts=3, backoff_s=2.0)
    started = time.monotonic()
    with pytest.raises(RemoteConnectError) as caught:
        conn.open()
    assert caught.value.attempts == 1 and not caught.value.retryable
    assert "authentication" in caught.value.message
    assert time.monotonic() - started < 2.0  # no backoff sleep happened


@pytest.mark.root
def test_deadline_ends_a_command_that_runs_too_long(netns_hosts: list[SshHost]) -> None:
    with connect_to(netns_hosts[0]) as conn:
        started = time.monotonic()
        with pytest.raises(RemoteDeadlineError) as caught:
            conn.run("sleep 30", deadline=1.0)
        elapsed = time.monotonic() - started
        assert 1.0 <= elapsed < 1.0 + SLACK_S
        assert caught.value.deadline_s == 1.0 and "deadline exceeded" in caught.value.message
        assert conn.run("echo again").stdout == "again\n"  # reconnects by itself


@pytest.mark.root
def test_open_channel_on_a_cut_link_fails_by_its_deadline(
    netns_host_factory: HostFactory,
) -> None:
    host = netns_host_factory()
    with connect_to(host) as conn:
        assert conn.run("true").ok
        cut_link(host)
        try:
            started = time.monotonic()
            with pytest.raises(RemoteDeadlineError):
                conn.run("echo still there", deadline=1.5)
            assert time.monotonic() - started < 1.5 + SLACK_S
            # a new connection behind the cut fails within the operation's deadline too
            started = time.monotonic()
            with pytest.raises(RemoteError):
                conn.run("true", deadline=2.0)
            assert time.monotonic() - started < 2.0 + SLACK_S
        finally:
            restore_link(host)
        assert conn.run("echo healed").stdout == "healed\n"


@pytest.mark.root
def test_setup_is_retried_with_backoff_until_the_host_is_back(
    ssh_network: HostNetwork, netns_host_factory: HostFactory
) -> None:
    host = netns_host_factory()
    kill_host(host)
    restarter = threading.Timer(0.5, ssh_network.restart_host, args=(host,))
    restarter.start()
    try:
        with connect_to(host, connect_attempts=5, backoff_s=0.2) as conn:
            started = time.monotonic()
            conn.open()  # refused at first; attempts at ~0, 0.2, 0.6, 1.4 s
            assert time.monotonic() - started >= 0.5
            assert conn.run("hostname").stdout.strip() == host.name
    finally:
        restarter.join()


@pytest.mark.root
def test_a_command_is_never_retried_when_the_host_dies_under_it(
    ssh_network: HostNetwork, netns_host_factory: HostFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    host = netns_host_factory(mounts=[Mount.bind(data, "/srv", read_only=False)])
    conn = connect_to(host, connect_attempts=4, backoff_s=0.2)
    killer = threading.Timer(0.7, kill_host, args=(host,))
    killer.start()
    try:
        with pytest.raises(RemoteError) as caught:
            conn.run("echo ran >> /srv/runs; sleep 20", deadline=10)
    finally:
        killer.join()
    assert not isinstance(caught.value, RemoteDeadlineError)  # noticed at once, not by deadline
    host = ssh_network.restart_host(host)
    assert conn.run("cat /srv/runs").stdout == "ran\n"  # ran exactly once
    conn.close()


def test_loopback_host_serves_the_calling_user(loopback_host: SshHost) -> None:
    with connect_to(loopback_host) as conn:
        result = conn.run("id -un; echo $SSH_CONNECTION")
    user, connection = result.stdout.splitlines()
    assert user == loopback_host.user
    assert connection.split()[2:] == ["127.0.0.1", str(loopback_host.port)]
