"""The one core call of ``dflashops bench``: a ``BenchRequest`` in, a ``BenchReport`` out.

A container NAME goes through ``bench_container`` (deployment, server log and roofline over
SSH); a URL is benchmarked as any client would, described by the playbook when one is given.
The labels the operator gave (``--method``, ``-k``) are in the config before the run starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from dflashops.bench.container import bench_container
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import BenchReport, ResolvedConfig
from dflashops.bench.progress import Progress
from dflashops.bench.request import BenchRequest
from dflashops.bench.roofline import plan_roofline, with_roofline
from dflashops.bench.runner import run_benchmark_sync
from dflashops.bench.settings import BenchSettings
from dflashops.bench.target import chosen_api, describe
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.playbooks import optional_container_playbook
from dflashops.errors import BenchmarkError
from dflashops.playbook.load import load_playbook, resolve_playbook_path
from dflashops.progress import Say

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory
    from dflashops.playbook.models import Playbook

# the bearer token of a --url server when neither --api-key-env nor a playbook names a variable
URL_API_KEY_ENV = "DFLASHOPS_API_KEY"
URL_LOG_NOTE = "server log not read: --url gives no SSH access (`bench NAME` reads it)"


def run_bench(
    request: BenchRequest,
    inventory: Callable[[], Inventory],
    *,
    progress: Progress | Say | None = None,
    environ: Mapping[str, str] | None = None,
) -> BenchReport:
    """Benchmark the request's server; the report is returned, not saved.

    ``inventory`` is called only for a container NAME (a URL needs none)."""
    env = os.environ if environ is None else environ
    book = request_playbook(request)
    settings = request.settings.resolve(book)
    if request.container is not None:
        return bench_container(
            inventory(),
            request.container,
            book,
            settings,
            progress=progress,
            api=request.api,
            environ=env,
            log_path=request.server_log,
            roofline=request.container_roofline,
            labels=request.labels,
        )
    return _bench_url(request, book, settings, env, progress)


def request_playbook(request: BenchRequest) -> Playbook | None:
    """``-p`` loaded; for a container without ``-p``, the one playbook naming it (if exactly
    one does)."""
    if request.container is not None:
        return optional_container_playbook(request.container, request.playbook)
    return (
        None if request.playbook is None else load_playbook(resolve_playbook_path(request.playbook))
    )


def _bench_url(
    request: BenchRequest,
    book: Playbook | None,
    settings: BenchSettings,
    environ: Mapping[str, str],
    progress: Progress | Say | None,
) -> BenchReport:
    assert request.url is not None
    values, sources = describe(book)
    key_env = request.api_key_env or (book.server.api_key_env if book else None)
    key = (
        server_api_key(key_env, environ, whose=request.url)
        if key_env
        else environ.get(URL_API_KEY_ENV)
    )
    endpoint = Endpoint(
        request.url,
        model=request.model or values.get("served_model_name"),
        api=chosen_api(request.api, book),
        api_key=key,
    )
    config = request.labels.apply(
        ResolvedConfig.model_validate({**values, "resolved_from": sources})
    )
    plan = plan_roofline(request.roofline, None) if request.roofline.names_hardware else None
    return with_roofline(
        lambda: run_benchmark_sync(
            endpoint, settings, config, progress=progress, notes=[URL_LOG_NOTE]
        ),
        plan,
    )


def nothing_completed(report: BenchReport, saved: Path) -> BenchmarkError | None:
    """The error for a level where every request failed (the partial result is in ``saved``),
    or None when each level completed at least one."""
    empty = [level for level in report.levels if level.completed == 0]
    if not empty:
        return None
    first = empty[0]
    return BenchmarkError(
        f"every request failed at concurrency {first.max_concurrency}: "
        f"{first.errors[0] if first.errors else 'no reply'}",
        hint=f"the partial result is in {saved}",
    )
