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
    from dflashops.bench.roofline import RooflinePlan
    from dflashops.inventory.load import Inventory
    from dflashops.playbook.models import Playbook
    from dflashops.remote import SshConnection
    from dflashops.tune.roofline_request import RooflineRequest

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
    roofline: RooflineRequest | None = None,
) -> BenchReport:
    """Benchmark container ``name``'s server (the report is returned, not saved).

    ``settings``: ``BenchSettings.from_playbook(playbook, ...)`` for the playbook's bench section.
    ``progress``: a ``Progress`` (per-level events) or a plain ``say(message)`` callable.

    The endpoint comes from ``deployed.json`` when present, else from the inventory address and
    ``playbook.server.port``; the API key from the environment variable the deployment names.
    ``log_path`` overrides the server log (default: the manifest's ``log_path``, else
    ``/var/log/dflashops/server.log``). ``connection`` replaces the SSH connection built from the
    inventory (it is then left open). ``roofline``: add the bandwidth roofline, from the
    container's GPUs and weights where the request is silent (``bench.roofline``).
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
        plan = None
        if roofline is not None:
            shown.phase(f"{name}: probing GPUs and weights for the roofline")
            plan = _roofline_plan(conn, roofline, playbook, deployed or Deployed())
        report = run_benchmark_sync(
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
    if plan is None:
        return report
    from dflashops.bench.roofline import attach_roofline

    return attach_roofline(report, plan)


def _roofline_plan(
    conn: SshConnection,
    request: RooflineRequest,
    playbook: Playbook | None,
    deployed: Deployed,
) -> RooflinePlan:
    """What the running server is (deployed.json first, as for the endpoint), then its facts."""
    from dflashops.bench.roofline import plan_roofline, probe_roofline_facts, tp_from_argv

    device = playbook.server.device if playbook else "cuda"
    model_dir = deployed.model if deployed.model and deployed.model.startswith("/") else None
    if model_dir is None and playbook is not None:
        model_dir = str(playbook.model.path)
    tp, tp_source = tp_from_argv(deployed.argv), "deployed.json"
    if tp is None and playbook is not None:
        tp, tp_source = playbook.server.tensor_parallel_size, "playbook"
    wants_gpu = request.gpu is None and request.bandwidth_gbps is None and device == "cuda"
    wants_weights = request.weights is None and (device == "cuda" or request.names_hardware)
    facts = probe_roofline_facts(
        conn, model_dir=model_dir if wants_weights else None, query_gpus=wants_gpu
    )
    return plan_roofline(request, facts, device=device, tp=tp, tp_source=tp_source)
