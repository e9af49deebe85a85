"""Group operations over real sshd hosts: every host's result or error is kept."""

from __future__ import annotations

import time

import pytest

from dflashops.errors import RemoteCommandError
from dflashops.lab.host_model import SshHost
from dflashops.remote import (
    GroupError,
    RemoteConnectError,
    RemoteDeadlineError,
    for_each_host,
    get_text,
    put_atomic,
    run_group,
)
from tests.support.faults import cut_link, kill_host, restore_link
from tests.support.ssh_hosts import HostFactory, connect_to

pytestmark = [pytest.mark.root, pytest.mark.timeout(120)]


def test_group_with_a_dead_host_reports_the_others_results(
    netns_hosts: list[SshHost], netns_host_factory: HostFactory
) -> None:
    dead = netns_host_factory()
    kill_host(dead)
    hosts = [netns_hosts[0], dead, netns_hosts[1]]
    connections = [connect_to(h, connect_attempts=1) for h in hosts]
    result = run_group(connections, "hostname")
    assert not result.ok
    assert {name: r.stdout.strip() for name, r in result.succeeded.items()} == {
        netns_hosts[0].name: netns_hosts[0].name,
        netns_hosts[1].name: netns_hosts[1].name,
    }
    assert list(result.failed) == [dead.name]
    assert isinstance(result.failed[dead.name], RemoteConnectError)
    assert [o.host for o in result.outcomes] == [h.name for h in hosts]  # order kept
    assert result.summary().startswith("2 of 3 hosts succeeded; failed: " + dead.name)
    with pytest.raises(GroupError) as caught:
        result.raise_if_failed()
    assert list(caught.value.failed) == [dead.name] and dead.name in caught.value.one_line()
    for conn in connections:
        conn.close()


def test_group_with_a_partitioned_host_finishes_by_the_deadline(
    netns_hosts: list[SshHost], netns_host_factory: HostFactory
) -> None:
    cut = netns_host_factory()
    connections = {h.name: connect_to(h) for h in [*netns_hosts, cut]}
    for conn in connections.values():
        conn.open()
    cut_link(cut)
    try:
        started = time.monotonic()
        result = run_group(connections, "echo ok", deadline=1.5)
        assert time.monotonic() - started < 2.5
    finally:
        restore_link(cut)
    assert sorted(result.succeeded) == sorted(h.name for h in netns_hosts)
    assert isinstance(result.failed[cut.name], RemoteDeadlineError)
    for conn in connections.values():
        conn.close()


def test_group_keeps_command_failures_per_host(netns_hosts: list[SshHost]) -> None:
    h1, h2 = netns_hosts
    connections = [connect_to(h1), connect_to(h2)]
    # fails on h1 only
    result = run_group(connections, f'test "$(hostname)" != {h1.name}')
    assert list(result.succeeded) == [h2.name]
    error = result.failed[h1.name]
    assert isinstance(error, RemoteCommandError) and error.exit_code == 1
    probed = run_group(connections, f'test "$(hostname)" != {h1.name}', ok_codes=None)
    assert probed.ok and [r.exit_code for r in probed.succeeded.values()] == [1, 0]
    for conn in connections:
        conn.close()


def test_group_runs_hosts_in_parallel(netns_hosts: list[SshHost]) -> None:
    connections = [connect_to(h) for h in netns_hosts]
    for conn in connections:
        conn.open()
    started = time.monotonic()
    result = run_group(connections, "sleep 1")
    assert result.ok and time.monotonic() - started < 1.8
    for conn in connections:
        conn.close()


def test_group_put_then_read_back(netns_hosts: list[SshHost]) -> None:
    connections = [connect_to(h) for h in netns_hosts]
    puts = for_each_host(
        connections, lambda c: put_atomic(c, f"for {c.name}\n".encode(), "/srv/group/f")
    )
    assert puts.ok
    reads = for_each_host(connections, lambda c: get_text(c, "/srv/group/f"))
    assert reads.raise_if_failed() == {h.name: f"for {h.name}\n" for h in netns_hosts}
    for conn in connections:
        conn.close()
