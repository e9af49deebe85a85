"""Where the launched server is reached from here (readiness is checked over the network, the
way every client will reach it)."""

from __future__ import annotations

from dflashops.launch.report import LaunchRefused
from dflashops.playbook.models import Playbook

_LOOPBACK = ("127.", "localhost", "::1")


def endpoint_host(playbook: Playbook, address: str) -> str:
    """The host readiness (and every client) reaches the server at, from the container's
    ``address``; a loopback ``server.host`` only where the container is this machine."""
    host = playbook.server.host
    if host in ("0.0.0.0", "::", ""):
        return address
    if host.startswith(_LOOPBACK):
        if address.startswith(_LOOPBACK):
            return host  # a loopback "container" (the machine itself, over SSH): same loopback
        raise LaunchRefused(
            f"server.host {host} is not reachable from here; launch checks readiness over the "
            "network",
            hint="serve on 0.0.0.0 or the container's address",
        )
    return host


def base_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
