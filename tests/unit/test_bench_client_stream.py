"""The bench client's streams over aiohttp, against a scripted server on 127.0.0.1 (real sockets).

The scripted server replies with exact bytes, so what the adapter must get right on top of
aiohttp (connections kept alive between requests, a kept-alive connection the server dropped, a
body left open after ``[DONE]``, broken framing becoming a failed record, proxies from the
environment) is what it really meets. The SSE splitting, our own code, is checked on every split
of a stream.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflashops.bench import client as bench_client
from dflashops.bench.client import (
    RequestOptions,
    _Stream,
    run_requests,
    stream_request,
    stream_session,
)
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import RequestRecord
from dflashops.bench.server_api import make_client
from dflashops.bench.workload import load_workload

Reply = Callable[[asyncio.StreamWriter, bytes], Awaitable[bool]]
"""Writes one response to the request body it gets; False closes the connection after it."""

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY")


class ScriptedServer:
    """Answers each request with the next reply of the script; counts connections."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.connections = 0
        self.request_lines: list[bytes] = []
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def __aenter__(self) -> ScriptedServer:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.replies:
                head = await reader.readuntil(b"\r\n\r\n")
                self.request_lines.append(head.split(b"\r\n", 1)[0])
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                keep = await self.replies.pop(0)(writer, body)
                await writer.drain()
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()


def sse(*events: dict[str, Any] | str) -> list[bytes]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


def token_events(tokens: int) -> list[bytes]:
    chunks = [{"choices": [{"index": 0, "delta": {"content": "w "}}]} for _ in range(tokens)]
    usage = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": tokens}}
    return sse(*chunks, usage, "[DONE]")


def chunk(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def stream_reply(
    tokens: int = 3, *, keep: bool = True, cut: bool = False, hold_open_s: float = 0.0
) -> Reply:
    """A chunked SSE stream as vLLM sends it; ``cut`` stops mid-body, ``hold_open_s`` waits
    after ``[DONE]`` before the body's last chunk."""

    async def reply(writer: asyncio.StreamWriter, body: bytes) -> bool:
        pieces = token_events(tokens)
        if cut:
            writer.write(HEAD + b"".join(chunk(p) for p in pieces)[:40])
            return False
        writer.write(HEAD)
        for piece in pieces:
            writer.write(chunk(piece))
            await writer.drain()
            await asyncio.sleep(0.001)
        if hold_open_s:
            await asyncio.sleep(hold_open_s)
        writer.write(b"0\r\n\r\n")
        return keep

    return reply


def send(url: str, count: int = 1, *, concurrency: int = 1) -> list[RequestRecord]:
    """``count`` streamed chat requests through ``run_requests``, as a benchmark level sends."""

    async def run() -> list[RequestRecord]:
        endpoint = Endpoint(url)
        prompts = [load_workload("smoke").prompts[0]] * count
        async with make_client(endpoint, concurrency) as client:
            records, _ = await run_requests(
                client,
                endpoint,
                "tiny",
                prompts,
                RequestOptions(max_tokens=8),
                concurrency=concurrency,
            )
        return records

    return asyncio.run(run())


async def scripted(replies: list[Reply], count: int) -> tuple[list[RequestRecord], int]:
    async with ScriptedServer(replies) as server:
        records = await asyncio.to_thread(send, server.url, count)
        return records, server.connections


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.integers(min_value=0, max_value=6),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
    crlf=st.booleans(),
    ping=st.booleans(),
)
def test_sse_events_survive_any_split(tokens: int, cuts: list[int], crlf: bool, ping: bool) -> None:
    raw = (b": ping\n\n" if ping else b"") + b"".join(token_events(tokens))
    if crlf:
        raw = raw.replace(b"\n", b"\r\n")
    stream = _Stream(sent=0.0)
    points = sorted({c for c in cuts if c < len(raw)} | {0, len(raw)})
    done = [stream.feed(raw[a:b], 1.0) for a, b in itertools.pairwise(points)]
    assert done[-1] and not any(done[:-1])  # over at the read that carries [DONE]
    assert (stream.chunks, stream.output_tokens, stream.error) == (tokens, tokens, None)


def test_requests_of_a_worker_share_one_connection() -> None:
    records, connections = asyncio.run(scripted([stream_reply(), stream_reply(5)], 2))
    assert [(r.success, r.output_tokens, r.chunks) for r in records] == [(True, 3, 3), (True, 5, 5)]
    assert connections == 1


def test_a_connection_closed_after_its_reply_is_not_reused() -> None:
    records, connections = asyncio.run(scripted([stream_reply(keep=False), stream_reply()], 2))
    assert all(r.success for r in records), [r.error for r in records]
    assert connections == 2


def test_a_request_dropped_on_a_kept_alive_connection_is_sent_once_more() -> None:
    async def drop(writer: asyncio.StreamWriter, body: bytes) -> bool:
        return False  # reads the request, closes without a reply

    records, connections = asyncio.run(scripted([stream_reply(), drop, stream_reply(4)], 2))
    assert [(r.success, r.output_tokens) for r in records] == [(True, 3), (True, 4)]
    assert connections == 2


def test_a_second_drop_is_a_failed_record() -> None:
    async def drop(writer: asyncio.StreamWriter, body: bytes) -> bool:
        return False

    (record,), connections = asyncio.run(scripted([drop, drop], 1))
    assert record.error is not None and record.error.startswith("ServerDisconnectedError")
    assert connections == 2


def test_a_body_cut_short_is_a_failed_record() -> None:
    (record,), _ = asyncio.run(scripted([stream_reply(cut=True)], 1))
    assert not record.success
    assert record.error is not None and record.error.startswith("ClientPayloadError")


def test_bad_chunk_framing_is_a_failed_record() -> None:
    async def bad_chunk(writer: asyncio.StreamWriter, body: bytes) -> bool:
        writer.write(HEAD + b"zz\r\nab\r\n")
        return False

    (record,), _ = asyncio.run(scripted([bad_chunk], 1))
    assert not record.success and record.error is not None
    assert "ClientPayloadError" in record.error or "chunk" in record.error.lower()


def test_error_status_is_a_record_and_keeps_the_connection() -> None:
    async def not_found(writer: asyncio.StreamWriter, body: bytes) -> bool:
        data = json.dumps({"error": {"message": "bad model"}}).encode()
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data))
        return True

    records, connections = asyncio.run(scripted([not_found, stream_reply()], 2))
    assert records[0].error == "HTTP 404: bad model"
    assert records[1].success
    assert connections == 1


def test_body_until_close_with_crlf_events_and_comments() -> None:
    """HTTP/1.0 style (no length, connection closes) and SSE framed with CRLF, a ping comment
    and a data field split over two lines: a record as from vLLM."""

    async def old_style(writer: asyncio.StreamWriter, body: bytes) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\n")
        writer.write(b": ping\r\n\r\n")
        writer.write(
            b'data: {"choices": [{"index": 0,\r\ndata:  "delta": {"content": "ab"}}]}\r\n\r\n'
        )
        writer.write(
            b'data: {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}'
        )
        writer.write(b"\r\n\r\ndata: [DONE]\r\n\r\n")
        return False

    (record,), _ = asyncio.run(scripted([old_style], 1))
    assert record.success, record.error
    assert (record.output_tokens, record.chunks, record.prompt_tokens) == (2, 1, 1)


def test_a_body_held_open_after_done_costs_at_most_the_drain_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench_client, "DRAIN_S", 0.2)
    started = time.perf_counter()
    records, connections = asyncio.run(scripted([stream_reply(hold_open_s=3.0), stream_reply()], 2))
    assert all(r.success for r in records), [r.error for r in records]
    assert time.perf_counter() - started < 2.5
    assert connections == 2  # the held connection was given up, not reused


def test_streams_go_through_the_proxy_the_environment_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)

    async def run() -> list[bytes]:
        async with ScriptedServer([stream_reply()]) as proxy:
            monkeypatch.setenv("http_proxy", proxy.url)
            # nothing listens there: the request succeeds only through the proxy
            endpoint = Endpoint("http://127.0.0.2:9")
            async with stream_session(endpoint, 1) as session:
                record = await stream_request(
                    session, endpoint, {"max_tokens": 3}, prompt_id="p", level_start=0.0
                )
            assert record.success, record.error
            return proxy.request_lines

    assert asyncio.run(run()) == [b"POST http://127.0.0.2:9/v1/chat/completions HTTP/1.1"]


def test_no_proxy_bypasses_the_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("http_proxy", "http://127.0.0.2:9")  # would refuse the connection
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    (record,), _ = asyncio.run(scripted([stream_reply()], 1))
    assert record.success, record.error


def test_unreachable_server_is_a_failed_record() -> None:
    async def run() -> RequestRecord:
        endpoint = Endpoint("http://127.0.0.2:9")
        async with stream_session(endpoint, 1) as session:
            return await stream_request(
                session, endpoint, {"max_tokens": 3}, prompt_id="p", level_start=0.0
            )

    record = asyncio.run(run())
    assert not record.success
    assert record.error is not None and record.error.startswith("ClientConnectorError")


def test_the_endpoint_timeout_fails_a_stream_not_its_drain() -> None:
    async def silent(writer: asyncio.StreamWriter, body: bytes) -> bool:
        await asyncio.sleep(2.0)  # never answers in time
        return False

    async def run(reply: Reply) -> RequestRecord:
        async with ScriptedServer([reply]) as server:
            endpoint = Endpoint(server.url, timeout_s=0.5)
            async with stream_session(endpoint, 1) as session:
                return await stream_request(
                    session, endpoint, {"max_tokens": 3}, prompt_id="p", level_start=0.0
                )

    assert asyncio.run(run(silent)).error == "timed out after 0.5 s"
    # [DONE] came, the body stays open: the timeout cuts only the wait for its end
    finished = asyncio.run(run(stream_reply(hold_open_s=5.0)))
    assert finished.success and finished.output_tokens == 3
