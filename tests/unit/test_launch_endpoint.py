"""Where launch reaches the server it started: the container's address, never a loopback of
another machine."""

from __future__ import annotations

import pytest

from dflashops.launch.endpoint import base_url, endpoint_host
from dflashops.launch.report import LaunchRefused
from dflashops.playbook.models import Playbook


def book(host: str) -> Playbook:
    return Playbook.model_validate(
        {
            "name": "b",
            "model": {"path": "/models/t"},
            "engine": {"version": "0.34.0"},
            "server": {"host": host},
        }
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_wildcard_is_reached_at_the_containers_address(host: str) -> None:
    assert endpoint_host(book(host), "10.0.0.5") == "10.0.0.5"


def test_a_named_address_is_reached_as_named() -> None:
    assert endpoint_host(book("10.0.0.9"), "10.0.0.5") == "10.0.0.9"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_a_loopback_server_on_another_machine_is_refused(host: str) -> None:
    with pytest.raises(LaunchRefused, match=f"server.host {host} is not reachable from here"):
        endpoint_host(book(host), "10.0.0.5")


def test_a_loopback_server_on_a_loopback_container_is_reached_there() -> None:
    # the GPU machine made its own container (benchmarks/gpu_compare_device.py): same loopback
    assert endpoint_host(book("127.0.0.1"), "127.0.0.1") == "127.0.0.1"
    assert base_url(endpoint_host(book("::1"), "::1"), 8000) == "http://[::1]:8000"
