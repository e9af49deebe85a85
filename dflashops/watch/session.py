"""The one core call of ``dflashops watch``: a ``WatchRequest`` in, a running watch out.

A container NAME is reached as ``bench NAME`` reaches it: its ``deployed.json`` (else its
playbook) gives the endpoint and the variable holding the API key; the same SSH connection then
follows the server log when the engine is not vLLM (vLLM's counters say everything a window
needs; SGLang's acceptance is only in its log). A URL is watched as any client would, its key
from ``DFLASHOPS_API_KEY`` as for ``bench --url``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dflashops.bench.container import read_deployment
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.entry import URL_API_KEY_ENV
from dflashops.bench.server_log import RemoteServerLog
from dflashops.bench.target import BenchTarget, resolve_target
from dflashops.deployment.access import connect
from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.deployment.playbooks import optional_container_playbook
from dflashops.watch.log_follow import LogFollower
from dflashops.watch.loop import WatchSettings, watch_windows
from dflashops.watch.scraper import MetricsScraper
from dflashops.watch.window import WatchWindow

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory


@dataclass(frozen=True)
class WatchRequest:
    """Exactly one of ``container`` and ``url``; ``playbook`` and ``server_log`` (the log's
    path in the container, default the layout's) only with a container."""

    container: str | None = None
    url: str | None = None
    playbook: str | None = None
    server_log: str | None = None
    settings: WatchSettings = field(default_factory=WatchSettings)

    def __post_init__(self) -> None:
        if (self.container is None) == (self.url is None):
            raise ValueError("watch: give a container NAME or a URL, not both or neither")


@dataclass(frozen=True)
class Watch:
    """A running watch: iterate ``windows``; ``server`` is its root URL, ``log_path`` the log
    read alongside (None: none), ``notes`` what finding the server said."""

    windows: Iterator[WatchWindow]
    server: str
    log_path: str | None = None
    notes: tuple[str, ...] = ()


@contextmanager
def open_watch(
    request: WatchRequest,
    inventory: Callable[[], Inventory],
    *,
    environ: Mapping[str, str] | None = None,
) -> Iterator[Watch]:
    """The watch of the request's server; its connections close when the block ends.

    ``inventory`` is called only for a container NAME (a URL needs none)."""
    env = os.environ if environ is None else environ
    settings = request.settings
    if request.url is not None:
        endpoint = Endpoint(request.url, api_key=env.get(URL_API_KEY_ENV) or None)
        with MetricsScraper(endpoint, timeout_s=settings.timeout_s) as scraper:
            root = endpoint.root()
            yield Watch(watch_windows(scraper, settings, root=root), root)
        return
    assert request.container is not None
    name = request.container
    book = optional_container_playbook(name, request.playbook)
    loaded = inventory()
    with connect(loaded, name) as conn:
        manifest, note = read_deployment(conn, DEFAULT_LAYOUT)
        target = resolve_target(
            name,
            loaded.container(name),
            book,
            manifest,
            environ=env,
            log_path=request.server_log or DEFAULT_LAYOUT.log,
            notes=[note] if note else [],
        )
        log_path = followed_log(target)
        log = LogFollower(RemoteServerLog(conn, log_path)) if log_path else None
        root = target.endpoint.root()
        with MetricsScraper(target.endpoint, timeout_s=settings.timeout_s) as scraper:
            windows = watch_windows(scraper, settings, log=log, root=root)
            yield Watch(windows, root, log_path, target.notes)


def followed_log(target: BenchTarget) -> str | None:
    """The log a watch reads each window: none for vLLM, whose counters hold every number."""
    if target.config.engine == "vllm":
        return None
    return target.log_path
