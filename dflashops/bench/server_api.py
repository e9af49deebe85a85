"""The server's side questions a benchmark asks over httpx, around the streams: which model it
serves (``/v1/models``, ``/version``), its counters (``/metrics``), a prefix-cache reset, and
whether it still answers at all.

Once the run is under way, a connection refused, reset or cut on these calls is
``ServerStopped`` (the run keeps what it measured), not an error about the call."""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from dflashops.bench.endpoint import (
    CONNECT_TIMEOUT_S,
    Endpoint,
    connection_failure,
    error_body_text,
    one_line,
)
from dflashops.bench.sglang_info import (
    SERVER_INFO_PATHS,
    ServedSpeculation,
    SglangInfo,
    parse_server_info,
)
from dflashops.bench.stopped import ServerStopped
from dflashops.errors import BenchmarkError

# the whole of one "are you there?" call: a server that takes longer is not answering
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class ServerInfo:
    """What ``/v1/models`` and ``/version`` (SGLang: ``/server_info``) tell about the server."""

    model: str
    models: tuple[str, ...]
    max_model_len: int | None
    version: str | None
    # only SGLang names itself and says what it speculates; vLLM's /version tells neither
    engine: str | None = None
    speculation: ServedSpeculation | None = None


def make_client(endpoint: Endpoint, concurrency: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        headers=endpoint.headers(),
        timeout=httpx.Timeout(endpoint.timeout_s, connect=CONNECT_TIMEOUT_S),
        limits=httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency),
    )


async def fetch_server_info(client: httpx.AsyncClient, endpoint: Endpoint) -> ServerInfo:
    """The served model (``endpoint.model`` checked, else the first), its max_model_len, version."""
    try:
        response = await client.get(endpoint.url("/v1/models"))
    except httpx.HTTPError as exc:
        raise BenchmarkError(
            f"{endpoint.root()}: cannot reach the server: {_describe(exc)}",
            hint="is it running? `dflashops status` shows the server's state",
        ) from exc
    if response.status_code != 200:
        raise BenchmarkError(
            f"{endpoint.root()}/v1/models: HTTP {response.status_code}: {_error_text(response)}"
        )
    try:
        listed = response.json().get("data", [])
    except (ValueError, AttributeError):
        raise BenchmarkError(f"{endpoint.root()}/v1/models: not an OpenAI model list") from None
    entries = [e for e in listed if isinstance(e, dict) and "id" in e]
    ids = tuple(str(e["id"]) for e in entries)
    if not ids:
        raise BenchmarkError(f"{endpoint.root()}: the server lists no model")
    model = endpoint.model or ids[0]
    if model not in ids:
        raise BenchmarkError(
            f"{endpoint.root()}: no served model {model!r}", hint=f"served: {', '.join(ids)}"
        )
    entry = entries[ids.index(model)]
    length = entry.get("max_model_len")
    version = _version(await _get_json(client, endpoint, "/version"))
    sglang = None if version else await _sglang(client, endpoint)
    return ServerInfo(
        model=model,
        models=ids,
        max_model_len=length if isinstance(length, int) else None,
        version=sglang.version if sglang else version,
        engine="sglang" if sglang else None,
        speculation=sglang.speculation if sglang else None,
    )


async def _sglang(client: httpx.AsyncClient, endpoint: Endpoint) -> SglangInfo | None:
    for path in SERVER_INFO_PATHS:
        if (found := parse_server_info(await _get_json(client, endpoint, path))) is not None:
            return found
    return None


async def _get_json(client: httpx.AsyncClient, endpoint: Endpoint, path: str) -> object:
    """The JSON of a 200 reply, else None: servers without the path are not an error."""
    try:
        reply = await client.get(endpoint.url(path))
        return reply.json() if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _version(reply: object) -> str | None:
    found = reply.get("version") if isinstance(reply, dict) else None
    return str(found) if found else None


async def scrape_metrics(client: httpx.AsyncClient, endpoint: Endpoint) -> str | None:
    """The ``/metrics`` text, or None when the server has no such endpoint."""
    try:
        response = await _side_call(client, endpoint, "GET", "/metrics")
    except httpx.HTTPError as exc:
        raise BenchmarkError(f"{endpoint.url('/metrics')}: {_describe(exc)}") from exc
    return response.text if response.status_code == 200 else None


# where each engine empties its prefix cache: vLLM's (only with VLLM_SERVER_DEV_MODE=1), then
# SGLang's radix cache flush (``/flush_cache``, http_server.py), which refuses (400) while a
# request is still finishing unless told to wait for idle (``timeout``, 0.5.16; older releases
# ignore the parameter)
RESET_PATHS = ("/reset_prefix_cache", "/flush_cache?timeout=30")


async def reset_prefix_cache(client: httpx.AsyncClient, endpoint: Endpoint) -> bool | None:
    """POST the engine's prefix-cache reset: True when done, None when the server offers none.

    A path the server does not serve answers 404 (or 405 where it knows it for GET only); an
    error reply is False, a lost connection ``ServerStopped``.
    """
    for path in RESET_PATHS:
        try:
            response = await _side_call(client, endpoint, "POST", path)
        except httpx.HTTPError:
            return False
        if response.status_code not in (404, 405):
            return response.status_code == 200
    return None


async def unanswered(endpoint: Endpoint, path: str = "/v1/models") -> str | None:
    """None when the server answers ``path`` on a fresh connection (any HTTP reply), else what
    failed, e.g. ``connection refused at http://…/v1/models``."""
    url = endpoint.url(path)
    async with make_client(endpoint, 1) as fresh:
        try:
            await fresh.get(url, timeout=PROBE_TIMEOUT_S)
        except httpx.TransportError as exc:
            return f"{connection_failure(exc)} at {url}"
    return None


async def _side_call(
    client: httpx.AsyncClient, endpoint: Endpoint, method: str, path: str
) -> httpx.Response:
    """``method path`` on the run's client. A lost connection is tried once more on a fresh one
    (a kept-alive connection the server closed is not a server gone); when that fails too, or
    the call timed out, and ``/v1/models`` is unanswered as well: ``ServerStopped``. A server
    that answers ``/v1/models`` gets the call's own error."""
    url = endpoint.url(path)
    try:
        return await client.request(method, url)
    except httpx.TimeoutException as exc:
        failure: httpx.TransportError = exc
    except httpx.TransportError:
        async with make_client(endpoint, 1) as fresh:
            try:
                return await fresh.request(method, url)
            except httpx.TransportError as again:
                failure = again
    if await unanswered(endpoint) is None:
        raise failure
    raise ServerStopped(f"{connection_failure(failure)} at {url}") from failure


def _error_text(response: httpx.Response) -> str:
    return error_body_text(response.content) or response.reason_phrase


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    return one_line(exc)
