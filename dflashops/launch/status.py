"""``server_status(conn)``: what serves in a container right now (for ``dflashops status``).

One SSH command reads the manifest, checks the pid, reads the running engine's own command line
(the speculative config *in effect*, which may differ from the files if someone edited them
after the start), its uptime and whether its port listens.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from dflashops.deployment.access import connect
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.managed import ManagedCheck
from dflashops.deployment.manifest import DeployedManifest
from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.launch.lifecycle import _HELPERS
from dflashops.remote import SshConnection
from dflashops.server.argv import flag_value

STATUS_DEADLINE_S = 30.0
_MARK = "--dflashops-manifest--"


class ServerStatus(BaseModel):
    """The server in one container. ``running`` is the truth from the process table."""

    model_config = ConfigDict(extra="forbid")

    host: str
    deployed: bool
    running: bool
    pid: int | None = None
    supervisor: str | None = None  # systemd | fallback
    supervisor_pid: int | None = None
    port: int | None = None
    listening: bool = False
    endpoint: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None
    speculative_config: dict[str, Any] | None = None
    served_model_name: str | None = None
    playbook: str | None = None
    uptime_s: int | None = None
    started_at: datetime | None = None
    dflashops_version: str | None = None
    problem: str | None = None  # e.g. an unreadable manifest


def status_script(layout: Layout) -> str:
    q = shlex.quote
    return _HELPERS + "\n".join(
        [
            f'pp=$(readpid {q(layout.pidfile)}); ours "$pp" && echo "pid $pp"',
            f'sp=$(readpid {q(layout.supervisor_pidfile)}); ours "$sp" && echo "supervisor $sp"',
            'if [ -n "$pp" ] && ours "$pp"; then',
            '    echo "cmdline $(tr "\\0" "\\n" < /proc/$pp/cmdline | base64 -w0)"',
            "    ut=$(cut -d' ' -f1 /proc/uptime)",
            "    st=$(sed 's/.*) //' /proc/$pp/stat | cut -d' ' -f20)",
            "    hz=$(getconf CLK_TCK 2>/dev/null || echo 100)",
            '    echo "uptime $(awk -v u="$ut" -v s="$st" -v h="$hz" '
            '\'BEGIN{printf "%d", u - s/h}\')"',
            "fi",
            "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null "
            '| awk \'$4 == "0A" {print "listen " $2}\'',
            f"if [ -f {q(layout.manifest)} ]; then echo {_MARK}; cat {q(layout.manifest)}; fi",
        ]
    )


def parse_status(output: str, host: str) -> ServerStatus:
    head, _, manifest_text = output.partition(_MARK + "\n")
    values: dict[str, str] = {}
    listening_ports: set[int] = set()
    for line in head.splitlines():
        key, _, value = line.partition(" ")
        if key == "listen":
            port_hex = value.rsplit(":", 1)[-1]
            try:
                listening_ports.add(int(port_hex, 16))
            except ValueError:
                continue
        else:
            values[key] = value.strip()
    manifest, problem = None, None
    if manifest_text.strip():
        try:
            manifest = DeployedManifest.from_text(manifest_text)
        except Exception as exc:  # a broken manifest must not hide the process facts
            problem = getattr(exc, "message", str(exc))
    pid = _int(values.get("pid"))
    argv = _argv(values.get("cmdline"))
    spec_config = _speculative_config(argv) if argv else None
    status = ServerStatus(
        host=host,
        deployed=manifest is not None,
        running=pid is not None,
        pid=pid,
        supervisor_pid=_int(values.get("supervisor")),
        uptime_s=_int(values.get("uptime")) if pid else None,
        problem=problem,
    )
    if manifest is not None:
        status.supervisor = manifest.supervisor
        status.port = manifest.port
        status.endpoint = manifest.endpoint
        status.engine = manifest.engine
        status.engine_version = manifest.engine_version
        status.served_model_name = manifest.served_model_name
        status.playbook = manifest.playbook
        status.dflashops_version = manifest.dflashops_version
        status.method = manifest.method
        status.num_speculative_tokens = manifest.num_speculative_tokens
        status.speculative_config = manifest.speculative_config
        status.started_at = manifest.started_at if pid == manifest.pid else None
    if argv:
        # the running process is the truth for what is in effect
        status.speculative_config = spec_config
        status.method = str(spec_config["method"]) if spec_config else "none"
        k = (spec_config or {}).get("num_speculative_tokens")
        status.num_speculative_tokens = k if isinstance(k, int) else None
        port = flag_value(argv, "--port")
        if port and port.isdigit():
            status.port = int(port)
    status.listening = status.port in listening_ports if status.port else False
    return status


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _argv(encoded: str | None) -> list[str] | None:
    import base64
    import binascii

    if not encoded:
        return None
    try:
        return base64.b64decode(encoded).decode("utf-8", "replace").split("\n")
    except (binascii.Error, ValueError):
        return None


def _speculative_config(argv: list[str]) -> dict[str, Any] | None:
    raw = flag_value(argv, "--speculative-config")
    if raw is None:
        algorithm = flag_value(argv, "--speculative-algorithm")  # SGLang
        if algorithm is None:
            return None
        steps = flag_value(argv, "--speculative-num-draft-tokens")
        config: dict[str, Any] = {"method": algorithm.lower()}
        if steps and steps.isdigit():
            config["num_speculative_tokens"] = int(steps) - 1
        return config
    try:
        data = json.loads(raw)
    except ValueError:
        return {"raw": raw}
    return data if isinstance(data, dict) else {"raw": raw}


def server_status(conn: SshConnection, layout: Layout = DEFAULT_LAYOUT) -> ServerStatus:
    """The server's state in the container ``conn`` reaches."""
    out = conn.run(status_script(layout), deadline=STATUS_DEADLINE_S, display="server status")
    return parse_status(out.stdout, conn.host)


def status_probe(inventory: Inventory, container: Container, entry: Any) -> dict[str, Any] | None:
    """The :data:`~dflashops.proxmox.lifecycle.ServerProbe` for ``dflashops status``: the server
    part of one running container, or its problem when SSH fails (never raises)."""
    host = entry.address or container.ssh_host
    if not host:
        return {"problem": "no address to reach the container over SSH"}
    try:
        # the status row was just located through PVE: tag, hostname and vmid already agree
        confirmed = ManagedCheck(container.name, entry.vmid, entry.node)
        with connect(
            inventory,
            container.name,
            host=host,
            pve_confirmed=confirmed,
            deadline=30.0,
            connect_attempts=1,
        ) as conn:
            return server_status(conn).model_dump(mode="json")
    except DflashopsError as exc:
        return {"problem": exc.one_line()}
