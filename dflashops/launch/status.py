"""``server_status(conn)``: what serves in a container right now (for ``dflashops status``).

One SSH command reads the manifest, checks the pid, reads the running engine's own command line
(the speculative config *in effect*, which may differ from the files if someone edited them
after the start), its uptime and whether its port listens.

A member of a placement (its ``placement.json``, written by ``launch``) also shows its role and
the group's health: every member's server process, read over SSH (:func:`placement_status`),
judged by :func:`group_health`. It lives here, not in :mod:`dflashops.launch.group`, because
``status_probe`` needs it and ``group`` builds on this module.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict

from dflashops.deployment.access import connect
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.managed import ManagedCheck
from dflashops.deployment.manifest import DeployedManifest, ManifestUnreadable, read_manifest
from dflashops.errors import DflashopsError, RemoteError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.launch.lifecycle import _HELPERS
from dflashops.launch.members import placement_file
from dflashops.launch.processes import parse_processes, processes_script, strays
from dflashops.playbook.engine_methods import sglang_k, sglang_method
from dflashops.remote import SshConnection, get_text
from dflashops.server.argv import flag_value

STATUS_DEADLINE_S = 30.0
_MARK = "--dflashops-manifest--"


class MemberStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    rank: int
    role: str
    address: str
    running: bool | None = None  # None: unreachable
    pid: int | None = None
    listening: bool | None = None
    error: str | None = None

    def what(self) -> str:
        """``lab-ct2 (worker, rank 1, 10.0.0.12)``: how a line names this member."""
        return f"{self.name} ({self.role}, rank {self.rank}, {self.address})"


GroupHealth = Literal["serving", "starting", "stopped", "degraded"]


class GroupView(BaseModel):
    """One member's view of its placement, for ``status``: its role and the group's health."""

    model_config = ConfigDict(extra="forbid")

    playbook: str
    role: str
    rank: int
    nodes: int
    health: GroupHealth
    problem: str | None = None  # one line naming the members that are down or unreachable
    members: list[MemberStatus]


class StrayProcess(BaseModel):
    """A process an earlier server left in its process group (an engine's worker whose API
    server was killed): it holds memory, GPU memory too, until it is ended."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    rss_mb: int
    command: str


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
    problem: str | None = None  # e.g. an unreadable manifest, or SSH failed
    placement: GroupView | None = None  # a member of a placement: its role and group health
    strays: list[StrayProcess] = []  # left by an earlier server: `launch` or `stop` ends them

    @property
    def loading(self) -> bool:
        """It runs but its port does not listen yet (a restarted server loading its model)."""
        return self.running and self.port is not None and not self.listening

    @classmethod
    def unreachable(cls, host: str, problem: str) -> ServerStatus:
        """What ``status`` shows when the container could not be asked."""
        return cls(host=host, deployed=False, running=False, problem=problem)


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
            processes_script(layout),
            f"if [ -f {q(layout.manifest)} ]; then echo {_MARK}; cat {q(layout.manifest)}; fi",
        ]
    )


def parse_status(output: str, host: str) -> ServerStatus:
    head, _, manifest_text = output.partition(_MARK + "\n")
    values: dict[str, str] = {}
    listening_ports: set[int] = set()
    for line in head.splitlines():
        key, _, value = line.partition(" ")
        if key == "proc":
            continue
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
    supervisor = _int(values.get("supervisor"))
    left = strays(parse_processes(head), pid, supervisor)
    argv = _argv(values.get("cmdline"))
    spec_config = _speculative_config(argv) if argv else None
    status = ServerStatus(
        host=host,
        deployed=manifest is not None,
        running=pid is not None,
        pid=pid,
        supervisor_pid=supervisor,
        uptime_s=_int(values.get("uptime")) if pid else None,
        problem=problem,
        strays=[StrayProcess(pid=p.pid, rss_mb=p.rss_kb // 1024, command=p.command) for p in left],
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
        config: dict[str, Any] = {"method": sglang_method(algorithm)}
        if steps and steps.isdigit() and (k := sglang_k(int(steps))) is not None:
            config["num_speculative_tokens"] = k
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


class LocatedRow(Protocol):
    """What the probe needs of a ``status`` row: where PVE found the container."""

    @property
    def address(self) -> str | None: ...
    @property
    def vmid(self) -> int | None: ...
    @property
    def node(self) -> str: ...


def status_probe(inventory: Inventory, container: Container, entry: LocatedRow) -> ServerStatus:
    """The :data:`~dflashops.proxmox.lifecycle.ServerProbe` for ``dflashops status``: the server
    part of one running container, or its problem when SSH fails (never raises). A placement
    member's part also carries ``placement`` (a :class:`GroupView`)."""
    host = entry.address or container.ssh_host
    if not host:
        return ServerStatus.unreachable("", "no address to reach the container over SSH")
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
            own = server_status(conn)
            record = read_placement(conn)
    except DflashopsError as exc:
        return ServerStatus.unreachable(host, exc.one_line())
    if record is not None:
        rows = placement_status(inventory, record, known={container.name: own})
        own.placement = group_view(record, container.name, rows)
    return own


# ---------------------------------------------------------------------- a placement's group


def read_placement(conn: SshConnection, layout: Layout = DEFAULT_LAYOUT) -> dict[str, Any] | None:
    """The ``placement.json`` a member keeps, or None: a single-container deployment (also when a
    single-container launch replaced a placement there: its manifest does not list the file).
    With ``deployed.json`` unreadable the file's presence decides (``stop`` must still stop the
    whole group)."""
    path = placement_file(layout)
    try:
        manifest = read_manifest(conn, layout)
    except ManifestUnreadable:
        manifest = None
    else:
        if manifest is None or all(f.path != path for f in manifest.files):
            return None
    try:
        data = json.loads(get_text(conn, path))
    except (RemoteError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("members"), list) else None


def placement_status(
    inventory: Inventory,
    record: Mapping[str, Any],
    *,
    layout: Layout = DEFAULT_LAYOUT,
    known: Mapping[str, ServerStatus] | None = None,
) -> list[MemberStatus]:
    """Each member's role and health (its process, and for the head the API port); ``known``:
    states already read (the member ``status`` asked about), not read again."""
    rows = []
    for entry in record["members"]:
        row = MemberStatus(
            name=str(entry["name"]),
            rank=int(entry["rank"]),
            role=str(entry["role"]),
            address=str(entry["address"]),
        )
        status = (known or {}).get(row.name)
        try:
            if status is None:
                with connect(
                    inventory, row.name, deadline=STATUS_DEADLINE_S, connect_attempts=1
                ).conn as conn:
                    status = server_status(conn, layout)
            row.running, row.pid = status.running, status.pid
            row.listening = status.listening if row.role == "head" else None
        except DflashopsError as exc:
            row.error = exc.one_line()
        rows.append(row)
    return rows


def group_health(rows: list[MemberStatus]) -> tuple[GroupHealth, str | None]:
    """The group's health from its members' states, and the one line naming what is wrong.

    A rank cannot run without the others, so the group is all or nothing: every member running
    is ``serving`` (``starting`` until the head's port listens), none running is ``stopped``;
    some running and some not, or a member that cannot be read, is ``degraded``."""
    unreachable = [r for r in rows if r.running is None]
    down = [r for r in rows if r.running is False]
    up = [r for r in rows if r.running]
    if not unreachable and not up:
        return "stopped", None
    if not unreachable and not down:
        head = next((r for r in rows if r.role == "head"), None)
        return ("serving" if head is None or head.listening else "starting"), None
    parts = [f"{r.what()} not running" for r in down]
    parts += [f"{r.what()} unreachable: {r.error}" for r in unreachable]
    return "degraded", "; ".join(parts)


def group_view(record: Mapping[str, Any], name: str, rows: list[MemberStatus]) -> GroupView:
    """``name``'s view of the placement ``record`` whose members' states are ``rows``."""
    mine = next((r for r in rows if r.name == name), None)
    health, problem = group_health(rows)
    return GroupView(
        playbook=str(record.get("playbook", "?")),
        role=mine.role if mine else str(record.get("role", "?")),
        rank=mine.rank if mine else int(record.get("rank", -1)),
        nodes=len(rows),
        health=health,
        problem=problem,
        members=rows,
    )
