"""``bench NAME``: benchmark the server of an inventory container, with its log read over SSH.

One SSH connection serves the whole run: it reads ``deployed.json`` (when ``launch`` wrote one),
then the server log's size before and its new bytes after each level. The requests themselves
go over HTTP, like any client's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING

from dflashops.bench.endpoint import Api
from dflashops.bench.models import BenchReport
from dflashops.bench.progress import Progress, as_progress
from dflashops.bench.request import RecordedLabels
from dflashops.bench.roofline import (
    RooflinePlan,
    plan_roofline,
    probe_roofline_facts,
    tp_from_argv,
    with_roofline,
)
from dflashops.bench.runner import run_benchmark_sync
from dflashops.bench.server_log import RemoteServerLog
from dflashops.bench.settings import BenchSettings
from dflashops.bench.target import resolve_target
from dflashops.deployment.access import connect
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.manifest import DeployedManifest, read_manifest
from dflashops.errors import DflashopsError
from dflashops.progress import Say

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.playbook.models import Playbook
    from dflashops.remote import SshConnection
    from dflashops.roofline.request import RooflineRequest


def read_deployment(conn: SshConnection, layout: Layout) -> tuple[DeployedManifest | None, str]:
    """The container's manifest (None when there is none, or it cannot be read) and a note that
    says which: a bench can go on from the playbook alone, so a bad manifest is not fatal."""
    try:
        manifest = read_manifest(conn, layout)
    except DflashopsError as exc:
        return None, f"{exc.one_line()}; ignored: the playbook describes the server"
    if manifest is None:
        return None, f"no {layout.manifest} in the container: the playbook describes the server"
    return manifest, ""


def bench_container(
    inventory: Inventory,
    name: str,
    playbook: Playbook | None,
    settings: BenchSettings,
    *,
    progress: Progress | Say | None = None,
    api: Api | None = None,
    environ: Mapping[str, str] | None = None,
    layout: Layout = DEFAULT_LAYOUT,
    log_path: str | None = None,
    connection: SshConnection | None = None,
    roofline: RooflineRequest | None = None,
    labels: RecordedLabels | None = None,
) -> BenchReport:
    """Benchmark container ``name``'s server (the report is returned, not saved).

    ``settings``: ``BenchSettings.from_playbook(playbook, ...)`` for the playbook's bench section.
    ``progress``: a ``Progress`` (per-level events) or a plain ``say(message)`` callable.

    The endpoint comes from ``deployed.json`` when present, else from the inventory address and
    ``playbook.server.port``; the API key from the environment variable the deployment names.
    ``log_path`` overrides the server log (default: the layout's). ``connection`` replaces the SSH
    connection built from the inventory (it is then left open). ``roofline``: add the bandwidth
    roofline, from the container's GPUs and weights where the request is silent
    (``bench.roofline``). ``labels``: what the operator says the server runs, recorded in the
    config before the run.
    """
    shown = as_progress(progress)
    with ExitStack() as stack:
        # a connection we open is ours to close; a given one stays open for its owner
        conn = connection or stack.enter_context(connect(inventory, name))
        shown.phase(f"{name}: reading the deployment")
        manifest, note = read_deployment(conn, layout)
        target = resolve_target(
            name,
            inventory.container(name),
            playbook,
            manifest,
            api=api,
            environ=os.environ if environ is None else environ,
            log_path=log_path or layout.log,
            notes=[note] if note else [],
        )
        notes = list(target.notes)
        server_log = RemoteServerLog(conn, target.log_path) if target.log_path else None
        plan = None
        if roofline is not None:
            shown.phase(f"{name}: probing GPUs and weights for the roofline")
            plan = _roofline_plan(conn, roofline, playbook, manifest)
        config = labels.apply(target.config) if labels else target.config
        return with_roofline(
            lambda: run_benchmark_sync(
                target.endpoint,
                settings,
                config,
                progress=shown,
                server_log=server_log,
                stats_interval_s=target.stats_interval_s,
                notes=notes,
            ),
            plan,
        )


def _roofline_plan(
    conn: SshConnection,
    request: RooflineRequest,
    playbook: Playbook | None,
    manifest: DeployedManifest | None,
) -> RooflinePlan:
    """What the running server is (deployed.json first, as for the endpoint), then its facts."""
    device = playbook.server.device if playbook else "cuda"
    deployed_model = str(manifest.spec.get("model") or "") if manifest else ""
    model_dir = deployed_model if deployed_model.startswith("/") else None
    if model_dir is None and playbook is not None:
        model_dir = str(playbook.model.path)
    tp, tp_source = tp_from_argv(manifest.argv if manifest else []), "deployed.json"
    if tp is None and playbook is not None:
        tp, tp_source = playbook.server.tensor_parallel_size, "playbook"
    wants_gpu = request.gpu is None and request.bandwidth_gbps is None and device == "cuda"
    wants_weights = request.weights is None and (device == "cuda" or request.names_hardware)
    facts = probe_roofline_facts(
        conn, model_dir=model_dir if wants_weights else None, query_gpus=wants_gpu
    )
    return plan_roofline(request, facts, device=device, tp=tp, tp_source=tp_source)
