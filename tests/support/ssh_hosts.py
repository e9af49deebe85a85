"""Real sshd hosts for tests (a pytest plugin: ``pytest_plugins = ["tests.support.ssh_hosts"]``).

* ``netns_hosts``: two netns hosts (``dfotest-h1``, ``dfotest-h2``) on bridge ``dfotest0``,
  10.200.1.0/24, shared by the session: do not break them (kill, cut, rate-limit).
* ``netns_host_factory``: fresh netns hosts for one test, which may break them at will.
* ``loopback_host``: sshd on 127.0.0.1 for the calling user (no root needed).

Netns fixtures skip, saying why, when not root or when ``ip netns`` or sshd is missing. Every
host verifies its host key: its ``known_hosts`` already holds it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from dflashops.lab.host_model import Mount, SshHost
from dflashops.lab.host_network import HostNetwork
from dflashops.lab.hosts import (
    loopback_unavailable_reason,
    netns_unavailable_reason,
    remove_netns_hosts,
    start_loopback_host,
    stop_host,
)
from dflashops.remote import SshConnection

TEST_BRIDGE = "dfotest0"
TEST_CIDR = "10.200.1.0/24"
HOST_PREFIX = "dfotest-"
# A private /root skips root's ~/.bashrc on this machine (pyenv init: ~0.2 s per command).
DEFAULT_MOUNTS: tuple[Mount, ...] = (Mount.tmpfs("/srv"), Mount.tmpfs("/root"))

HostFactory = Callable[..., SshHost]


def connect_to(host: SshHost, **options: Any) -> SshConnection:
    """A connection to a test host with test-sized limits (any ``SshConnection`` option wins)."""
    settings: dict[str, Any] = {
        "deadline": 20.0,
        "connect_timeout": 3.0,
        "connect_attempts": 2,
        "backoff_s": 0.2,
        "name": host.name,
    }
    settings.update(options)
    return SshConnection.from_access(host.access(), **settings)


@pytest.fixture(scope="session")
def ssh_network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostNetwork]:
    """Bridge ``dfotest0`` (10.200.1.1/24) for netns hosts; leftovers of a crashed run removed."""
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(f"netns SSH hosts unavailable: {reason}")
    remove_netns_hosts(HOST_PREFIX)
    network = HostNetwork(TEST_BRIDGE, TEST_CIDR, tmp_path_factory.mktemp("netns-hosts"))
    network.up()
    try:
        yield network
    finally:
        network.down()


@pytest.fixture(scope="session")
def netns_hosts(ssh_network: HostNetwork) -> list[SshHost]:
    """Two healthy hosts for the session (private /srv and /root). Never break these."""
    return [ssh_network.start_host(f"{HOST_PREFIX}h{i}", mounts=DEFAULT_MOUNTS) for i in (1, 2)]


_factory_names = itertools.count(1)


@pytest.fixture
def netns_host_factory(ssh_network: HostNetwork) -> Iterator[HostFactory]:
    """``start(mounts=...) -> SshHost``: fresh hosts for one test, removed after it.

    Restart a host through ``ssh_network.restart_host`` so teardown sees the new sshd.
    """
    started: list[str] = []

    def start(*, mounts: Sequence[Mount] = DEFAULT_MOUNTS) -> SshHost:
        name = f"{HOST_PREFIX}f{next(_factory_names)}"
        host = ssh_network.start_host(name, mounts=mounts)
        started.append(name)
        return host

    yield start
    for name in started:
        host = ssh_network.hosts.get(name)
        if host is not None:
            ssh_network.stop_host(host)


@pytest.fixture(scope="session")
def loopback_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    """sshd on 127.0.0.1 and a free port, logging in as the user running the tests."""
    reason = loopback_unavailable_reason()
    if reason:
        pytest.skip(f"loopback SSH host unavailable: {reason}")
    host = start_loopback_host("loopback", workdir=tmp_path_factory.mktemp("loopback-host"))
    try:
        yield host
    finally:
        stop_host(host)
