"""The PVE API down or hung (issue 32): one line that says why (connection refused, timed out
after the inventory's ``timeout_s``), one wait per command however many containers it names,
and a plain rerun that converges once the API answers again.

The API is the PVE double in this process behind a :class:`Gate` on 127.0.0.1, a TCP relay
the test turns ``down`` (nothing listens: refused), ``hung`` (accepts, never answers) or ``up``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pytest
import yaml

from dflashops.errors import ProxmoxError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab.pve import PveDouble, serve_double
from dflashops.proxmox.apply import ProvisionOptions, ProvisionRequest, plan_provision
from dflashops.proxmox.client import PveClient
from dflashops.proxmox.lifecycle import container_status
from tests.support.inventories import double_cluster
from tests.support.lab import run_cli

pytestmark = pytest.mark.timeout(90)

TIMEOUT_S = 1.5
CONTAINERS = ("c1", "c2", "c3")
Mode = Literal["down", "hung", "up"]


class Gate:
    """A TCP relay on 127.0.0.1 to ``target_port`` whose behaviour the test sets."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.mode: Mode = "down"
        self._listener: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()

    def set(self, mode: Mode) -> None:
        with self._lock:
            self.mode = mode
            if mode == "down":
                self._close_listener()
                for conn in self._held:
                    conn.close()
                self._held.clear()
            elif self._listener is None:
                self._listen()

    def close(self) -> None:
        self.set("down")

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._held.append(conn)
                if self.mode == "up":
                    upstream = socket.create_connection(("127.0.0.1", self.target_port))
                    self._held.append(upstream)
                    for src, dst in ((conn, upstream), (upstream, conn)):
                        threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


@pytest.fixture
def double(tmp_path: Path) -> Iterator[PveDouble]:
    with serve_double(tmp_path / "pve", create_delay=0.1, task_delay=0.01) as running:
        yield running


@pytest.fixture
def gate(double: PveDouble) -> Iterator[Gate]:
    relay = Gate(double.port)
    relay.set("up")  # binds the port the inventory names
    yield relay
    relay.close()


@pytest.fixture
def inventory_file(double: PveDouble, gate: Gate, tmp_path: Path) -> Path:
    cluster = double_cluster(double, tmp_path)
    cluster.update(api_url=f"https://127.0.0.1:{gate.port}", timeout_s=TIMEOUT_S)
    doc = {
        "clusters": {"lab": cluster},
        "containers": {
            name: {"vmid": 970 + i, "network": {"ip": f"10.200.99.{70 + i}/24"}}
            for i, name in enumerate(CONTAINERS)
        },
    }
    path = tmp_path / "inventory.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture
def inventory(inventory_file: Path) -> Inventory:
    return load_inventory(inventory_file)


def login(inventory: Inventory) -> tuple[str, float]:
    """(the one line, seconds) of a login that must fail."""
    started = time.monotonic()
    with pytest.raises(ProxmoxError) as caught:
        PveClient.for_cluster(inventory, "lab")
    return caught.value.one_line(), time.monotonic() - started


def assert_plain(line: str) -> None:
    """One line, none of the library's wording, nothing cut."""
    assert "\n" not in line
    assert "\u2026" not in line, line
    assert "HTTPSConnectionPool" not in line and "Max retries" not in line, line


def test_api_down_says_connection_refused_at_once(gate: Gate, inventory: Inventory) -> None:
    gate.set("down")
    line, elapsed = login(inventory)
    assert_plain(line)
    assert f"127.0.0.1:{gate.port}" in line and "connection refused" in line, line
    assert "hint:" in line, line
    assert elapsed < 1.0


def test_hung_api_fails_after_timeout_s_and_says_it(gate: Gate, inventory: Inventory) -> None:
    gate.set("hung")
    line, elapsed = login(inventory)
    assert_plain(line)
    assert f"127.0.0.1:{gate.port} timed out after {TIMEOUT_S:g} s" in line, line
    assert "timeout_s" in line, line  # the hint names the setting
    assert TIMEOUT_S <= elapsed < TIMEOUT_S + 1.0


def test_status_of_several_containers_waits_out_one_timeout(
    gate: Gate, inventory: Inventory
) -> None:
    gate.set("hung")
    started = time.monotonic()
    rows = container_status(inventory)
    elapsed = time.monotonic() - started
    assert [r.state for r in rows] == ["error"] * len(CONTAINERS)
    for row in rows:
        assert row.note is not None and f"timed out after {TIMEOUT_S:g} s" in row.note, row.note
    assert elapsed < 2 * TIMEOUT_S, f"{elapsed:.1f} s: the API was asked once per container"


def test_provision_plan_of_several_containers_waits_out_one_timeout(
    gate: Gate, inventory: Inventory
) -> None:
    gate.set("hung")
    request = ProvisionRequest(inventory, options=ProvisionOptions(guest=False))
    started = time.monotonic()
    plan = plan_provision(request)
    elapsed = time.monotonic() - started
    errors = [c.entry.error or "" for c in plan.containers]
    assert all(f"timed out after {TIMEOUT_S:g} s" in e for e in errors), errors
    assert elapsed < 2 * TIMEOUT_S, f"{elapsed:.1f} s: the API was asked once per container"


@pytest.mark.parametrize("fault", ["down", "hung"])
def test_cli_says_one_line_and_a_plain_rerun_converges(
    fault: Mode, gate: Gate, inventory_file: Path
) -> None:
    env = dict(os.environ, NO_COLOR="1", COLUMNS="200")
    gate.set(fault)
    failed = run_cli(env, "-i", str(inventory_file), "status", check=False)
    assert failed.returncode == 1
    # in a pipe, one progress line per container (in inventory order), then the one error line
    lines = failed.stderr.splitlines()
    progress = [line for line in lines if line.startswith("status: ")]
    assert [line.split(":")[1].strip() for line in progress] == list(CONTAINERS)
    errors = [line for line in lines if line not in progress]
    assert len(errors) == 1 and errors[0].startswith("error: "), failed.stderr
    assert_plain(errors[0])
    cause = "connection refused" if fault == "down" else f"timed out after {TIMEOUT_S:g} s"
    assert cause in errors[0], errors[0]

    gate.set("up")
    rerun = run_cli(env, "-i", str(inventory_file), "status", "--json", check=False)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stderr == ""
    states = {row["name"]: row["state"] for row in yaml.safe_load(rerun.stdout)}
    assert states == dict.fromkeys(CONTAINERS, "absent")
