"""``bench NAME``: benchmark the server of an inventory container, with its log read over SSH.

One SSH connection serves the whole run: it reads ``deployed.json`` (when ``launch`` wrote one),
then the server log's size before and its new bytes after each level. The requests themselves
go over HTTP, like any client's.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING

from dflashops.bench.client import Api
from dflashops.bench.models import BenchReport
from dflashops.bench.runner import BenchSettings, Progress, Say, as_progress, run_benchmark_sync
from dflashops.bench.server_log import RemoteServerLog
from dflashops.bench.target import DEPLOYED_MANIFEST, Deployed, resolve_target
from dflashops.errors import RemoteError

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.playbook.models import Playbook
    from dflashops.remote import SshConnection

MAX_MANIFEST_BYTES = 1 * 2**20


def read_deployed(conn: SshConnection, path: str = DEPLOYED_MANIFEST) -> Deployed | None:
    """The container's deployment manifest, or None when there is none (not launched yet)."""
    from dflashops.remote import get_bytes

    quoted = shlex.quote(path)
    exists = conn.probe(f"test -f {quoted}")
    if exists.exit_code != 0:
        return None
    try:
        data = get_bytes(conn, path, max_bytes=MAX_MANIFEST_BYTES)
    except RemoteError as exc:
        return Deployed(problems=(f"{path}: {exc.one_line()}; ignored",))
    return Deployed.from_text(data.decode("utf-8", errors="replace"), source=path)


def bench_container(
    inventory: Inventory,
    name: str,
    playbook: Playbook | None,
    settings: BenchSettings,
    *,
    progress: Progress | Say | None = None,
    api: Api = "chat",
    environ: Mapping[str, str] | None = None,
    manifest_path: str = DEPLOYED_MANIFEST,
    log_path: str | None = None,
    connection: SshConnection | None = None,
) -> BenchReport:
    """Benchmark container ``name``'s server (the report is returned, not saved).

    ``settings``: ``BenchSettings.from_playbook(playbook, ...)`` for the playbook's bench section.
    ``progress``: a ``Progress`` (per-level events) or a plain ``say(message)`` callable.

    The endpoint comes from ``deployed.json`` when present, else from the inventory address and
    ``playbook.server.port``; the API key from the environment variable the deployment names.
    ``log_path`` overrides the server log (default: the manifest's ``log_path``, else
    ``/var/log/dflashops/server.log``). ``connection`` replaces the SSH connection built from the
    inventory (it is then left open).
    """
    from dflashops.remote import SshConnection

    shown = as_progress(progress)
    container = inventory.container(name)
    conn = connection or SshConnection.from_access(
        container.ssh, host=container.ssh_host, name=name
    )
    try:
        shown.phase(f"{name}: reading the deployment")
        deployed = read_deployed(conn, manifest_path)
        target = resolve_target(
            name,
            container,
            playbook,
            deployed,
            api=api,
            environ=os.environ if environ is None else environ,
            log_path=log_path,
        )
        notes = list(target.notes)
        if deployed is None:
            notes.append(f"no {manifest_path} in {name}: the playbook describes the server")
        server_log = RemoteServerLog(conn, target.log_path) if target.log_path else None
        return run_benchmark_sync(
            target.endpoint,
            settings,
            target.config,
            progress=shown,
            server_log=server_log,
            stats_interval_s=target.stats_interval_s,
            notes=notes,
        )
    finally:
        if connection is None:
            conn.close()
