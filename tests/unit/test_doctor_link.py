"""doctor's link measurement with its real scripts: both ends run here in ``bash`` (as they run
on two members over SSH), the bytes cross a real TCP socket on 127.0.0.1."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from dflashops.doctor.link import (
    listen_script,
    measure_link,
    parse_listen,
    parse_received,
    send_script,
)
from dflashops.errors import RemoteError
from dflashops.remote import SshConnection

pytestmark = pytest.mark.timeout(60)


@dataclass
class Ran:
    stdout: str


class LocalShell:
    """What :func:`measure_link` uses of an SSH connection, run in a local ``bash``."""

    def run(self, command: str, *, deadline: float, display: str = "command") -> Ran:
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=deadline, check=False
        )
        if done.returncode != 0:
            raise RemoteError(
                f"{display} exited {done.returncode}: {done.stdout}{done.stderr}", host="local"
            )
        return Ran(done.stdout)


def shell() -> SshConnection:
    return cast(SshConnection, LocalShell())


def test_bytes_cross_a_real_socket_and_are_timed() -> None:
    sample = measure_link(
        shell(), shell(), source="a", target="b", address="127.0.0.1", nbytes=8 << 20
    )
    assert sample.error is None, sample.error
    assert sample.nbytes == 8 << 20 and sample.seconds > 0
    assert sample.gbit_s is not None and sample.gbit_s > 0
    assert sample.line().startswith("a -> b: ") and "8 MiB" in sample.line()


def test_no_listener_is_a_named_error() -> None:
    # an address this machine does not have: the listener cannot bind, no port comes back
    before = set(Path("/tmp").glob("dflashops-link.*"))
    sample = measure_link(
        shell(), shell(), source="a", target="b", address="192.0.2.1", nbytes=1 << 20
    )
    assert sample.error == "no listener on b 192.0.2.1"
    assert sample.line() == "a -> b: not measured (no listener on b 192.0.2.1)"
    assert set(Path("/tmp").glob("dflashops-link.*")) == before  # its result file did not stay


def test_parsers_and_hostile_addresses_stay_quoted() -> None:
    assert parse_listen("file /tmp/dflashops-link.x\nport 40123\n") == (
        "/tmp/dflashops-link.x",
        40123,
    )
    assert parse_received("port 1\nreceived 1048576 0.010000\n") == (1048576, 0.01)
    assert parse_received("port 1\n") is None
    hostile = "1.2.3.4; touch /tmp/pwned"
    assert "'1.2.3.4; touch /tmp/pwned'" in listen_script(hostile)
    assert "'1.2.3.4; touch /tmp/pwned'" in send_script(hostile, 1, 1)
