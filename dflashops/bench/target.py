"""What ``bench NAME`` measures and where: the endpoint and the ``ResolvedConfig`` of a container's
server, from the inventory (address), the playbook (port, served name, API key variable, engine,
drafter) and, when ``launch`` left one, the container's ``/etc/dflashops/deployed.json``.

The manifest describes what actually runs, so its values win over the playbook's. It is read
defensively, as whatever version of ``launch`` wrote it: the URL from ``url`` or ``endpoint``
(else ``host`` + ``port``), the server spec from ``server_spec`` or ``spec`` (``argv``, ``env``,
``model``, ``drafter``, ``method``, ``num_speculative_tokens``, ``engine_version``), and
``engine``, ``engine_version``, ``method``, ``num_speculative_tokens``, ``served_model_name``,
``playbook``, ``api_key_env``, ``log_path`` at the top. A missing key is simply not used; a value
of the wrong type becomes a note, never a failure. ``ResolvedConfig.resolved_from`` records where
each value came from.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dflashops.bench.client import Api, Endpoint
from dflashops.bench.models import ResolvedConfig
from dflashops.bench.runner import DEFAULT_STATS_INTERVAL_S
from dflashops.bench.server_log import DEFAULT_SERVER_LOG
from dflashops.errors import BenchmarkError
from dflashops.inventory.models import Container
from dflashops.playbook.load import playbook_dirs
from dflashops.playbook.models import Playbook

DEPLOYED_MANIFEST = "/etc/dflashops/deployed.json"
STATS_INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
_SECRET_FLAGS = frozenset({"--api-key", "--hf-token"})
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True)
class Deployed:
    """The usable part of a ``deployed.json`` (every field optional) and what was not usable."""

    url: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    num_speculative_tokens: int | None = None
    model: str | None = None
    drafter: str | None = None
    method: str | None = None
    served_model_name: str | None = None
    playbook: str | None = None
    api_key_env: str | None = None
    log_path: str | None = None
    argv: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    problems: tuple[str, ...] = ()

    @classmethod
    def from_text(cls, text: str, *, source: str = DEPLOYED_MANIFEST) -> Deployed:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return cls(problems=(f"{source}: not JSON ({exc.msg}); ignored",))
        if not isinstance(data, dict):
            return cls(problems=(f"{source}: not a JSON object; ignored",))
        problems: list[str] = []
        spec_key = "server_spec" if "server_spec" in data else "spec"
        spec = data.get(spec_key)
        if spec is not None and not isinstance(spec, dict):
            problems.append(f"{source}: {spec_key} is not an object; ignored")
            spec = None
        spec = spec or {}

        def text_of(mapping: Mapping[str, Any], key: str) -> str | None:
            value = mapping.get(key)
            if value is None:
                return None
            if isinstance(value, str) and value:
                return value
            problems.append(f"{source}: {key} is not a string; ignored")
            return None

        def count_of(mapping: Mapping[str, Any], key: str) -> int | None:
            value = mapping.get(key)
            if value is None:
                return None
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
            problems.append(f"{source}: {key} is not a count; ignored")
            return None

        argv = spec.get("argv")
        if argv is not None and not (
            isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        ):
            problems.append(f"{source}: {spec_key}.argv is not a list of strings; ignored")
            argv = None
        env = spec.get("env")
        if env is not None and not (
            isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
        ):
            problems.append(f"{source}: {spec_key}.env is not a string mapping; ignored")
            env = None
        args = tuple(argv or ())
        url = text_of(data, "url") or text_of(data, "endpoint")
        host, port = text_of(data, "host"), count_of(data, "port")
        if url is None and host and port:
            url = f"http://{host}:{port}"
        k = count_of(data, "num_speculative_tokens")
        return cls(
            url=url,
            engine=text_of(data, "engine") or text_of(spec, "engine"),
            engine_version=text_of(data, "engine_version") or text_of(spec, "engine_version"),
            num_speculative_tokens=k if k is not None else count_of(spec, "num_speculative_tokens"),
            model=text_of(spec, "model"),
            drafter=text_of(spec, "drafter"),
            method=text_of(data, "method") or text_of(spec, "method"),
            served_model_name=text_of(data, "served_model_name")
            or flag_value(args, "--served-model-name"),
            playbook=text_of(data, "playbook"),
            api_key_env=text_of(data, "api_key_env"),
            log_path=text_of(data, "log_path"),
            argv=args,
            env=dict(env or {}),
            problems=tuple(problems),
        )


@dataclass(frozen=True)
class BenchTarget:
    """Everything a container benchmark needs before it sends a request."""

    endpoint: Endpoint
    config: ResolvedConfig
    log_path: str | None
    stats_interval_s: float
    notes: tuple[str, ...] = ()


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag VALUE`` or ``--flag=VALUE`` (the last one wins, as argparse's)."""
    value = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value


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


def container_address(container: Container) -> str | None:
    """Where the container's server listens from outside: its static address, else its SSH host."""
    return container.network.address or container.ssh_host


def resolve_target(
    name: str,
    container: Container,
    playbook: Playbook | None,
    deployed: Deployed | None,
    *,
    api: Api = "chat",
    environ: Mapping[str, str],
    log_path: str | None = None,
) -> BenchTarget:
    """The endpoint and config of container ``name``'s server (pure: no I/O)."""
    deployed = deployed or Deployed()
    address = container_address(container)
    if deployed.url:
        url, url_source = server_url(deployed.url, address), "deployed.json"
    elif playbook is not None and address:
        url, url_source = f"http://{address}:{playbook.server.port}", "playbook"
    else:
        missing = (
            "the container has no address (network.ip or ssh.host)"
            if playbook
            else "no playbook names its port (-p PLAYBOOK)"
        )
        raise BenchmarkError(
            f"cannot tell where {name}'s server listens: no url in {DEPLOYED_MANIFEST}, and "
            f"{missing}",
            hint="launch it with `dflashops launch NAME -p PLAYBOOK`, or pass --url",
        )
    values, sources = describe(playbook, deployed)
    values.update(container=name, url=url)
    sources.update(container="inventory", url=url_source)
    notes = list(deployed.problems)
    env = deployed.env or (playbook.server.env if playbook else {})
    interval, interval_note = _stats_interval(env)
    if interval_note:
        notes.append(interval_note)
    read_log: str | None = log_path or deployed.log_path or DEFAULT_SERVER_LOG
    extra_args = playbook.server.extra_args if playbook else []
    if "--disable-log-stats" in (*deployed.argv, *extra_args):
        notes.append("server log not read: the server runs with --disable-log-stats")
        read_log = None
    config = ResolvedConfig.model_validate({**values, "resolved_from": sources})
    key_env = deployed.api_key_env or (playbook.server.api_key_env if playbook else None)
    endpoint = Endpoint(
        url,
        model=config.served_model_name,
        api=api,
        api_key=api_key(key_env, environ, whose=f"{name}'s server"),
    )
    return BenchTarget(
        endpoint=endpoint,
        config=config,
        log_path=read_log,
        stats_interval_s=interval,
        notes=tuple(notes),
    )


def describe(
    playbook: Playbook | None, deployed: Deployed | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """``ResolvedConfig`` values and their sources: the manifest's where it has them, else the
    playbook's."""
    deployed = deployed or Deployed()
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


def api_key(env_name: str | None, environ: Mapping[str, str], *, whose: str) -> str | None:
    """The API key from ``$env_name`` (None when no variable is named); a named but unset
    variable is an error, not an unauthenticated run."""
    if not env_name:
        return None
    value = environ.get(env_name)
    if not value:
        raise BenchmarkError(
            f"{whose} wants an API key from ${env_name}, which is not set",
            hint=f"export {env_name}=… (the key is read from the environment, never argv)",
        )
    return value


def playbook_for_container(name: str, folders: Sequence[Path] | None = None) -> Path | None:
    """The one playbook (in ``playbook_dirs()``) whose ``container`` is ``name``; None when
    there is none, or several."""
    import yaml

    found: dict[Path, Path] = {}
    for folder in playbook_dirs() if folders is None else folders:
        for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8"))
            except (OSError, yaml.YAMLError, UnicodeDecodeError):
                continue
            if isinstance(data, dict) and data.get("container") == name:
                found.setdefault(path.resolve(), path)
    return next(iter(found.values())) if len(found) == 1 else None


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
