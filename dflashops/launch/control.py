"""``stop``, ``restart`` and ``logs`` of the deployed server (the files stay as deployed)."""

from __future__ import annotations

import os
import shlex
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager

from pydantic import BaseModel, ConfigDict

from dflashops.deployment.access import ContainerAccess, connect
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.lock import container_lock
from dflashops.deployment.manifest import ManifestUnreadable, read_manifest, write_manifest
from dflashops.errors import DflashopsError, ServerError
from dflashops.inventory.load import Inventory
from dflashops.launch import lifecycle
from dflashops.launch.core import DEFAULT_READY_TIMEOUT_S, restart
from dflashops.launch.group import MemberStop, read_placement, stop_placement
from dflashops.progress import Say, quiet

FOLLOW_POLL_S = 1.0


class StopReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    container: str
    was_running: bool
    pid: int | None = None
    members: list[MemberStop] = []  # a placement member stops its whole group: each member
    note: str | None = None  # e.g. deployed.json could not be read (the server is stopped)


class RestartReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    container: str
    endpoint: str
    pid: int
    ready_in_s: float


def stop_server(
    inventory: Inventory,
    container_name: str,
    *,
    layout: Layout = DEFAULT_LAYOUT,
    access: ContainerAccess | None = None,
    wait_s: float | None = None,
    progress: Say | None = None,
) -> StopReport:
    """Stop the server (under systemd also disable it, so a reboot does not bring it back).
    A member of a placement stops its whole group (every member, even when one is unreachable).
    ``access``: an open connection the caller keeps; ``wait_s``: for a busy container."""
    with _locked(
        inventory, container_name, access, "stop", wait_s=wait_s, progress=progress
    ) as target:
        conn = target.conn
        record = read_placement(conn, layout)
        if record is not None:
            group = stop_placement(inventory, record, container=container_name, layout=layout)
            if not group.complete:
                failed = "; ".join(f"{m.name}: {m.error}" for m in group.members if m.error)
                raise ServerError(f"stopped the reachable members; not stopped: {failed}")
            mine = next((m for m in group.members if m.name == container_name), None)
            running = any(m.was_running for m in group.members)
            return StopReport(
                container=container_name,
                was_running=running,
                pid=mine.pid if mine else None,
                members=list(group.members),
            )
        state = lifecycle.run_state(conn, layout)
        if state.running or state.strays:  # stop ends every group a server was started in
            lifecycle.stop(conn, systemd=state.systemd, layout=layout, disable=True)
        note = None
        try:
            manifest = read_manifest(conn, layout)
        except ManifestUnreadable as exc:  # stopping needs only the pid files and the groups
            manifest = None
            note = f"{exc.message}; `dflashops launch {container_name} --force` rebuilds it"
        if manifest is not None and manifest.pid is not None:
            write_manifest(
                conn, manifest.model_copy(update={"pid": None, "started_at": None}), layout
            )
    return StopReport(
        container=container_name, was_running=state.running, pid=state.server_pid, note=note
    )


def restart_server(
    inventory: Inventory,
    container_name: str,
    *,
    progress: Say | None = None,
    timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
    layout: Layout = DEFAULT_LAYOUT,
    access: ContainerAccess | None = None,
    wait_s: float | None = None,
) -> RestartReport:
    """Stop and start the deployed server and wait until it is ready again (the launch core's
    ``restart``: a server that does not come back is stopped, with its log's cause)."""
    env = os.environ if environ is None else environ
    with _locked(
        inventory, container_name, access, "restart", wait_s=wait_s, progress=progress
    ) as target:
        conn = target.conn
        record = read_placement(conn, layout)
        if record is not None:  # its ranks cannot rejoin a running group: the group restarts
            head = record["members"][0]["name"]
            raise DflashopsError(
                f"{container_name} is a member of a placement; it cannot restart alone",
                hint=f"restart the group: dflashops launch {head} -p {record['playbook']}",
            )
        manifest = read_manifest(conn, layout)
        if manifest is None:
            raise DflashopsError(
                f"nothing is deployed in {container_name}", hint="run `dflashops launch` first"
            )
        api_key = server_api_key(manifest.api_key_env, env, whose=f"the server in {container_name}")
        report = restart(
            target, manifest, api_key=api_key, progress=progress, timeout_s=timeout_s, layout=layout
        )
    assert report.pid is not None and report.ready_in_s is not None
    return RestartReport(
        container=container_name,
        endpoint=manifest.endpoint,
        pid=report.pid,
        ready_in_s=report.ready_in_s,
    )


@contextmanager
def _locked(
    inventory: Inventory,
    name: str,
    access: ContainerAccess | None,
    command: str,
    *,
    wait_s: float | None,
    progress: Say | None,
) -> Iterator[ContainerAccess]:
    """The caller's open connection, or a new one closed afterwards; the container locked for
    ``command`` meanwhile (held already when the caller holds it)."""
    with ExitStack() as stack:
        target = access
        if target is None:
            target = connect(inventory, name)
            stack.enter_context(target)
        lock = container_lock(target.conn, name, command, wait_s=wait_s, say=progress or quiet)
        stack.enter_context(lock)
        yield target


def read_logs(
    inventory: Inventory, container_name: str, *, lines: int, layout: Layout = DEFAULT_LAYOUT
) -> str:
    """The last ``lines`` lines of the server log."""
    target = connect(inventory, container_name)
    with target.conn as conn:
        out = conn.run(
            f"tail -n {int(lines)} {shlex.quote(layout.log)} 2>/dev/null",
            ok_codes=None,
            deadline=60.0,
            display="tail log",
        )
    return out.stdout


def follow_logs(
    inventory: Inventory,
    container_name: str,
    *,
    lines: int,
    layout: Layout = DEFAULT_LAYOUT,
    poll_s: float = FOLLOW_POLL_S,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[str]:
    """The last ``lines`` lines, then whatever is appended (polled; each read is bounded).
    A log that shrank (rotated or truncated) is read again from its start."""
    q = shlex.quote(layout.log)
    target = connect(inventory, container_name)
    with target.conn as conn:
        first = conn.run(
            f"wc -c < {q} 2>/dev/null || echo 0; tail -n {int(lines)} {q} 2>/dev/null",
            ok_codes=None,
            deadline=60.0,
            display="tail log",
        ).stdout
        size, _, text = first.partition("\n")
        yield text
        offset = int(size.strip() or 0)
        while not should_stop():
            time.sleep(poll_s)
            chunk = conn.run(
                f"n=$(wc -c < {q} 2>/dev/null || echo 0); echo $n; "
                f'if [ "$n" -gt {offset} ]; then '
                f"tail -c +{offset + 1} {q} | head -c $((n - {offset})); fi",
                ok_codes=None,
                deadline=60.0,
                display="follow log",
            ).stdout
            head, _, body = chunk.partition("\n")
            size_now = int(head.strip() or 0)
            if size_now < offset:  # rotated or truncated: start over
                offset = 0
                continue
            if body:
                yield body
            offset = size_now
