"""A connection reset under a running command (issue 32): the error names the cause, and
nothing else reaches stderr (paramiko once printed "Socket exception: Connection reset by peer
(104)" through logging's last resort, since nobody configures its logger in a plain run).

The client runs in a child process, as the CLI does: inside pytest, the logging plugin's own
handlers would hide a stray line. The reset comes from a TCP relay between it and a loopback
sshd, which drops its client side with RST.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.lab.host_model import SshHost

pytestmark = pytest.mark.timeout(60)

CLIENT = """
import sys
from dflashops.errors import RemoteError
from dflashops.remote import SshConnection

port, user, key_file, known_hosts = sys.argv[1:]
conn = SshConnection(
    "127.0.0.1", port=int(port), user=user, key_file=key_file, known_hosts=known_hosts,
    connect_attempts=1, deadline=20,
)
conn.open()
print("open", flush=True)
try:
    conn.run("sleep 15")
except RemoteError as exc:
    print(exc.one_line(), flush=True)
else:
    print("no error", flush=True)
"""


class ResettingRelay:
    """127.0.0.1:port relayed to ``target``; :meth:`reset` drops every client with RST."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.clients: list[socket.socket] = []
        self.upstreams: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.clients.append(client)
            self.upstreams.append(upstream)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()

    def reset(self) -> None:
        clients, self.clients = self.clients, []
        for client in clients:
            # linger 0: the close sends RST, the client's next read fails with ECONNRESET. The
            # close takes effect once the pump blocked in recv() lets go: SHUT_RD wakes it
            # without sending anything.
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            client.shutdown(socket.SHUT_RD)
            client.close()
        upstreams, self.upstreams = self.upstreams, []
        for upstream in upstreams:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)
            upstream.close()

    def close(self) -> None:
        self.reset()
        self.listener.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)


@pytest.fixture
def relay(loopback_host: SshHost) -> Iterator[ResettingRelay]:
    running = ResettingRelay((loopback_host.address, loopback_host.port))
    yield running
    running.close()


def test_a_reset_connection_is_one_error_with_its_cause_and_no_stray_line(
    loopback_host: SshHost, relay: ResettingRelay, tmp_path: Path
) -> None:
    # the host's key under the relay's address: no new key to record (and no warning about it)
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(
        "".join(
            f"[127.0.0.1]:{relay.port} {line.split(maxsplit=1)[1]}\n"
            for line in loopback_host.known_hosts.read_text().splitlines()
            if line.strip()
        )
    )
    args = [str(relay.port), loopback_host.user, str(loopback_host.key_file), str(known_hosts)]
    child = subprocess.Popen(
        [sys.executable, "-c", CLIENT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "open\n"
        time.sleep(0.5)  # `sleep 15` is running
        relay.reset()
        reset_at = time.monotonic()
        stdout, stderr = child.communicate(timeout=30)
        ended_after = time.monotonic() - reset_at
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert stderr == "", "a stray line reached stderr"
    lost = "`sleep 15`: connection lost before the command finished (connection reset by peer)"
    assert lost in stdout, stdout
    assert ended_after < 3.0, f"{ended_after:.1f} s: the reset was noticed only at the deadline"
