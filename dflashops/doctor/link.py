"""Throughput of the link between two placement members, for doctor: one bulk TCP transfer.

The receiving member listens on an ephemeral port of the address the others reach it at (the
range ``launch`` allows between members where the PVE firewall is on, see
:mod:`dflashops.launch.firewall`); the examined member sends :data:`LINK_BYTES` of zeros to it;
the receiver times the bytes from the first to the last. Both ends are short ``python3``
programs with a deadline (``timeout``), so nothing is left behind when a member hangs. 64 MiB
is a moment on a data-centre link (50 ms at 10 Gbit/s) and next to nothing beside what the
ranks of a serving group move: it does not load the link the group uses.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass

from dflashops.errors import DflashopsError
from dflashops.remote import SshConnection

LINK_BYTES = 64 << 20
LINK_DEADLINE_S = 30.0

_RECEIVE = """
import socket, sys, time
family = socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET
s = socket.socket(family)
s.bind((sys.argv[1], 0))
s.listen(1)
out = open(sys.argv[2], "w")
out.write("port %d\\n" % s.getsockname()[1])
out.flush()
s.settimeout(25)
c, _ = s.accept()
n, first = 0, None
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    if first is None:
        first = time.monotonic()
    n += len(b)
last = time.monotonic()
out.write("received %d %.6f\\n" % (n, last - (first or last)))
out.close()
"""

_SEND = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
chunk, left = bytes(1 << 20), int(sys.argv[3])
while left > 0:
    c.sendall(chunk[: min(left, len(chunk))])
    left -= len(chunk)
c.shutdown(socket.SHUT_WR)
c.recv(1)
c.close()
"""


@dataclass(frozen=True)
class LinkSample:
    """``source`` -> ``target`` (member names): bytes received and the seconds they took."""

    source: str
    target: str
    nbytes: int = 0
    seconds: float = 0.0
    error: str | None = None

    @property
    def gbit_s(self) -> float | None:
        if self.error or self.seconds <= 0:
            return None
        return self.nbytes * 8 / self.seconds / 1e9

    def line(self) -> str:
        if self.error:
            return f"{self.source} -> {self.target}: not measured ({self.error})"
        return (
            f"{self.source} -> {self.target}: {self.gbit_s:.1f} Gbit/s "
            f"({self.nbytes >> 20} MiB in {self.seconds:.3f} s)"
        )


def listen_script(address: str) -> str:
    q = shlex.quote
    return "\n".join(
        [
            "command -v python3 >/dev/null || { echo 'no python3'; exit 3; }",
            "f=$(mktemp /tmp/dflashops-link.XXXXXX)",
            f'nohup timeout {int(LINK_DEADLINE_S)} python3 -c {q(_RECEIVE)} {q(address)} "$f" '
            ">/dev/null 2>&1 &",
            'for i in $(seq 1 50); do [ -s "$f" ] && break; sleep 0.1; done',
            'echo "file $f"; head -n 1 "$f"',
        ]
    )


def send_script(address: str, port: int, nbytes: int) -> str:
    q = shlex.quote
    return (
        "command -v python3 >/dev/null || { echo 'no python3'; exit 3; }\n"
        f"timeout {int(LINK_DEADLINE_S)} python3 -c {q(_SEND)} {q(address)} {port} {nbytes}"
    )


def result_script(path: str) -> str:
    q = shlex.quote(path)
    return (
        f'for i in $(seq 1 100); do grep -q "^received " {q} && break; sleep 0.1; done; '
        f"cat {q}; rm -f {q}"
    )


def parse_listen(output: str) -> tuple[str | None, int | None]:
    path, port = None, None
    for line in output.splitlines():
        key, _, value = line.partition(" ")
        if key == "file":
            path = value.strip() or None
        elif key == "port" and value.strip().isdigit():
            port = int(value.strip())
    return path, port


def parse_received(output: str) -> tuple[int, float] | None:
    for line in output.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[0] == "received":
            try:
                return int(fields[1]), float(fields[2])
            except ValueError:
                return None
    return None


def measure_link(
    sender: SshConnection,
    receiver: SshConnection,
    *,
    source: str,
    target: str,
    address: str,
    nbytes: int = LINK_BYTES,
) -> LinkSample:
    """Send ``nbytes`` from ``sender`` to ``receiver`` listening on ``address``."""
    try:
        listening = receiver.run(
            listen_script(address), deadline=LINK_DEADLINE_S, display="link listener"
        )
        path, port = parse_listen(listening.stdout)
        if path is None or port is None:
            if path is not None:  # the listener never bound: its empty result file goes
                receiver.run(f"rm -f {shlex.quote(path)}", deadline=LINK_DEADLINE_S)
            return LinkSample(source, target, error=f"no listener on {target} {address}")
        try:
            started = time.monotonic()
            sender.run(
                send_script(address, port, nbytes),
                deadline=LINK_DEADLINE_S,
                display="link transfer",
            )
            sent_s = time.monotonic() - started
        finally:
            done = receiver.run(result_script(path), deadline=LINK_DEADLINE_S, display="link")
    except DflashopsError as exc:
        return LinkSample(source, target, error=exc.one_line())
    received = parse_received(done.stdout)
    if received is None or received[0] != nbytes:
        got = f"{received[0]} of {nbytes} bytes" if received else "no result"
        return LinkSample(source, target, error=f"{got} arrived in {sent_s:.1f} s")
    return LinkSample(source, target, nbytes=received[0], seconds=received[1])
