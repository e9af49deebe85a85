"""Test-wide rules: a network guard (loopback and the lab subnet only) and shared helpers."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ["tests.support.ssh_hosts", "tests.support.vllm_servers"]

# Every test host, lab bridge and lab container lives in this range; nothing else may be contacted
# (the example inventory names real private addresses that must never see a packet from a test).
ALLOWED_NETWORKS = (
    ipaddress.ip_network("127.0.0.0/8"),
    ipaddress.ip_network("::1/128"),
    ipaddress.ip_network("10.200.0.0/16"),
)


class ForbiddenConnection(AssertionError):
    """A test tried to reach an address outside loopback and the lab subnet."""


def _check_address(address: Any) -> None:
    if not isinstance(address, tuple) or not address:
        return  # AF_UNIX paths and the like
    host = address[0]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        # a hostname: only names that resolve to allowed addresses may be used
        infos = socket.getaddrinfo(host, None)
        for info in infos:
            _check_address((info[4][0],))
        return
    if not any(ip in net for net in ALLOWED_NETWORKS):
        raise ForbiddenConnection(f"test tried to connect to {host}: outside loopback/lab subnet")


@pytest.fixture(autouse=True, scope="session")
def network_guard() -> Iterator[None]:
    """Fail any socket connection outside loopback and the lab subnet."""
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex

    def guarded_connect(self: socket.socket, address: Any) -> None:
        _check_address(address)
        original_connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        _check_address(address)
        return original_connect_ex(self, address)

    socket.socket.connect = guarded_connect  # type: ignore[method-assign,assignment]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        socket.socket.connect = original_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = original_connect_ex  # type: ignore[method-assign]
