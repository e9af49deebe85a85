"""What ``bench NAME`` measures and where: the endpoint and the ``ResolvedConfig`` of a container's
server, from the inventory (address), the playbook (port, served name, API key variable, engine,
drafter) and, when ``launch`` left one, the container's ``deployed.json``.

The manifest describes what actually runs, so its values win over the playbook's.
``ResolvedConfig.resolved_from`` records where each value came from.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dflashops.bench.endpoint import Api, Endpoint
from dflashops.bench.level import DEFAULT_STATS_INTERVAL_S
from dflashops.bench.models import ResolvedConfig
from dflashops.deployment.access import server_address
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.deployment.manifest import DeployedManifest
from dflashops.errors import BenchmarkError
from dflashops.inventory.models import Container
from dflashops.playbook.models import Playbook

STATS_INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True)
class BenchTarget:
    """Everything a container benchmark needs before it sends a request."""

    endpoint: Endpoint
    config: ResolvedConfig
    log_path: str | None
    stats_interval_s: float
    notes: tuple[str, ...] = ()


def redact_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the values of secret-bearing flags replaced."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append("***")
            hide_next = False
        elif arg in _SECRET_FLAGS:
            shown.append(arg)
            hide_next = True
        elif arg.split("=", 1)[0] in _SECRET_FLAGS and "=" in arg:
            shown.append(arg.split("=", 1)[0] + "=***")
        else:
            shown.append(arg)
    return shown


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    return {k: "***" if _SECRET_NAME.search(k) else v for k, v in env.items()}


def server_url(url: str, container_address: str | None) -> str:
    """The manifest's URL as reachable from here. It is the server's own view: a wildcard host
    (``0.0.0.0``) becomes the container's address, and so does a loopback one unless the
    container itself is reached over loopback."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if not container_address:
        return url
    wildcard = host in _WILDCARD_HOSTS
    loopback = _is_loopback(host) and not _is_loopback(container_address)
    if not (wildcard or loopback):
        return url
    address = f"[{container_address}]" if ":" in container_address else container_address
    netloc = address if parts.port is None else f"{address}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def chosen_api(api: Api | None, playbook: Playbook | None) -> Api:
    """The command's ``--api``, else the playbook's ``bench.api``, else chat."""
    return api or (playbook.bench.api if playbook else "chat")


def resolve_target(
    name: str,
    container: Container,
    playbook: Playbook | None,
    manifest: DeployedManifest | None,
    *,
    api: Api | None = None,
    environ: Mapping[str, str],
    log_path: str = DEFAULT_LAYOUT.log,
    notes: Sequence[str] = (),
) -> BenchTarget:
    """The endpoint and config of container ``name``'s server (pure: no I/O).

    ``log_path``: the server log to read (None when the server writes none we can read);
    ``notes``: what reading the deployment found (carried into the report)."""
    address = server_address(container)
    if manifest is not None:
        root = manifest.endpoint.removesuffix("/").removesuffix("/v1")
        url, url_source = server_url(root, address), "deployed.json"
    elif playbook is not None and address:
        url, url_source = f"http://{address}:{playbook.server.port}", "playbook"
    else:
        missing = (
            "the container has no address (network.ip or ssh.host)"
            if playbook
            else "no playbook names its port (-p PLAYBOOK)"
        )
        raise BenchmarkError(
            f"cannot tell where {name}'s server listens: nothing deployed by launch, and {missing}",
            hint="launch it with `dflashops launch NAME -p PLAYBOOK`, or pass --url",
        )
    values, sources = describe(playbook, manifest)
    values.update(container=name, url=url)
    sources.update(container="inventory", url=url_source)
    notes = list(notes)
    argv = manifest.argv if manifest else []
    env = manifest.env if manifest else (playbook.server.env if playbook else {})
    interval, interval_note = _stats_interval(env)
    if interval_note:
        notes.append(interval_note)
    read_log: str | None = log_path
    extra_args = playbook.server.args_for(playbook.engine.name) if playbook else []
    if "--disable-log-stats" in (*argv, *extra_args):
        notes.append("server log not read: the server runs with --disable-log-stats")
        read_log = None
    config = ResolvedConfig.model_validate({**values, "resolved_from": sources})
    key_env = manifest.api_key_env if manifest else None
    if key_env is None and playbook is not None:
        key_env = playbook.server.api_key_env
    endpoint = Endpoint(
        url,
        model=config.served_model_name,
        api=chosen_api(api, playbook),
        api_key=server_api_key(key_env, environ, whose=f"{name}'s server"),
    )
    return BenchTarget(
        endpoint=endpoint,
        config=config,
        log_path=read_log,
        stats_interval_s=interval,
        notes=tuple(notes),
    )


def describe(
    playbook: Playbook | None, manifest: DeployedManifest | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """``ResolvedConfig`` values and their sources: the manifest's where it has them, else the
    playbook's."""
    deployed = _ManifestValues.of(manifest)
    book = playbook
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def pick(key: str, from_manifest: Any, from_book: Any) -> None:
        for source, value in (("deployed.json", from_manifest), ("playbook", from_book)):
            if value is not None:
                values[key] = value
                sources[key] = source
                return

    drafter_model = book.drafter.model if book else None
    pick("engine", deployed.engine, book.engine.name if book else None)
    pick("engine_version", deployed.engine_version, book.engine.version if book else None)
    pick("model", deployed.model, (book.model.repo or str(book.model.path)) if book else None)
    pick("served_model_name", deployed.served_model_name, book.served_name if book else None)
    pick(
        "drafter",
        deployed.drafter,
        (drafter_model.repo or str(drafter_model.path)) if drafter_model else None,
    )
    pick("method", deployed.method, book.drafter.method if book else None)
    pick(
        "num_speculative_tokens",
        deployed.num_speculative_tokens,
        book.server.num_speculative_tokens if book else None,
    )
    pick("max_model_len", None, book.server.max_model_len if book else None)
    playbook_args = None
    if book is not None:
        playbook_args = book.server.model_dump(mode="json")
        playbook_args["env"] = redact_env(book.server.env)
    manifest_args = None
    if deployed.argv:
        manifest_args = {"argv": redact_argv(deployed.argv), **_env_arg(deployed.env)}
    pick("server_args", manifest_args, playbook_args)
    pick("playbook", deployed.playbook, book.name if book else None)
    return values, sources


@dataclass(frozen=True)
class _ManifestValues:
    """The manifest's side of :func:`describe` (all None without a manifest)."""

    engine: str | None = None
    engine_version: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    drafter: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None
    playbook: str | None = None
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, manifest: DeployedManifest | None) -> _ManifestValues:
        if manifest is None:
            return cls()
        spec = manifest.spec
        return cls(
            engine=manifest.engine,
            engine_version=manifest.engine_version,
            model=str(spec["model"]) if spec.get("model") else None,
            served_model_name=manifest.served_model_name,
            drafter=str(spec["drafter"]) if spec.get("drafter") else None,
            method=manifest.method,
            num_speculative_tokens=manifest.num_speculative_tokens,
            playbook=manifest.playbook,
            argv=tuple(manifest.argv),
            env=manifest.env,
        )


def _env_arg(env: Mapping[str, str]) -> dict[str, Any]:
    return {"env": redact_env(env)} if env else {}


def _stats_interval(env: Mapping[str, str]) -> tuple[float, str | None]:
    raw = env.get(STATS_INTERVAL_ENV)
    if raw is None:
        return DEFAULT_STATS_INTERVAL_S, None
    try:
        value = float(raw)
    except ValueError:
        value = 0.0
    if value <= 0:
        return DEFAULT_STATS_INTERVAL_S, (
            f"{STATS_INTERVAL_ENV}={raw!r} is not a positive number; assumed "
            f"{DEFAULT_STATS_INTERVAL_S:g} s"
        )
    return value, None
