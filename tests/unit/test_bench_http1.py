"""The lean HTTP/1.1 stream client against a scripted server on 127.0.0.1 (real sockets).

The scripted server replies with exact bytes, so framing edge cases (chunks split anywhere,
trailers, a kept-alive connection the server dropped, a body cut short) are what the client
really meets, not a model of them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dflashops.bench.client import Endpoint, stream_request
from dflashops.bench.http1 import Http1Connection, Http1Error, _Body, lean_target

Reply = Callable[[asyncio.StreamWriter, bytes], Awaitable[bool]]
"""Writes one response to the request body it gets; False closes the connection after it."""


class ScriptedServer:
    """Answers each request with the next reply of the script; counts connections."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.connections = 0
        self.bodies: list[bytes] = []
        self.server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

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
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length)
                self.bodies.append(body)
                keep = await self.replies.pop(0)(writer, body)
                await writer.drain()
                if not keep:
                    break
        except asyncio.IncompleteReadError:
            pass
        writer.close()


def sse(*events: dict[str, Any] | str) -> list[bytes]:
    return [f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events]


def chunked(pieces: list[bytes], trailer: bytes = b"") -> bytes:
    body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p)
    return body + b"0\r\n" + trailer + b"\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def stream_reply(tokens: int = 3, *, keep: bool = True, cut: bool = False) -> Reply:
    async def reply(writer: asyncio.StreamWriter, body: bytes) -> bool:
        events = [{"choices": [{"index": 0, "delta": {"content": "w "}}]} for _ in range(tokens)]
        usage = {"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": tokens}}
        pieces = sse(*events, usage, "[DONE]")
        if cut:
            writer.write(HEAD + chunked(pieces)[:40])
            return False
        writer.write(HEAD)
        for piece in pieces:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.001)
        writer.write(b"0\r\n\r\n")
        return keep

    return reply


def collect() -> tuple[list[bytes], Callable[[bytes, float], bool]]:
    got: list[bytes] = []

    def sink(data: bytes, now: float) -> bool:
        got.append(data)
        return b"[DONE]" in b"".join(got)

    return got, sink


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.binary(min_size=1, max_size=40), min_size=0, max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
    extension=st.booleans(),
    trailer=st.booleans(),
)
def test_chunked_framing_survives_any_split(
    pieces: list[bytes], cuts: list[int], extension: bool, trailer: bool
) -> None:
    encoded = (
        b"".join(b"%x%s\r\n%s\r\n" % (len(p), b";ext=1" if extension else b"", p) for p in pieces)
        + b"0\r\n"
        + (b"X-Trailer: yes\r\n" if trailer else b"")
        + b"\r\n"
    )
    body = _Body({"transfer-encoding": "chunked"})
    points = sorted({c for c in cuts if c < len(encoded)} | {0, len(encoded)})
    out = b"".join(body.feed(encoded[a:b]) for a, b in itertools.pairwise(points))
    assert out == b"".join(pieces)
    assert body.done


def test_content_length_body_stops_at_its_length() -> None:
    body = _Body({"content-length": "5"})
    assert body.feed(b"abc") == b"abc" and not body.done
    assert body.feed(b"deXX") == b"de" and body.done


def test_bad_chunk_size_is_an_error() -> None:
    with pytest.raises(Http1Error, match="bad chunk size"):
        _Body({"transfer-encoding": "chunked"}).feed(b"zz\r\nab\r\n")


def test_keep_alive_serves_requests_on_one_connection() -> None:
    async def run() -> tuple[int, list[bytes]]:
        async with ScriptedServer([stream_reply(), stream_reply(5)]) as server:
            conn = Http1Connection("127.0.0.1", server.port, headers={"Authorization": "Bearer k"})
            results = []
            for _ in range(2):
                got, sink = collect()
                status, _ = await conn.post_stream("/v1/chat/completions", b"{}", sink)
                assert status == 200
                results.append(b"".join(got))
            await conn.aclose()
            return server.connections, results

    connections, results = asyncio.run(run())
    assert connections == 1
    assert results[0].count(b'"content"') == 3 and results[1].count(b'"content"') == 5


def test_a_dropped_keep_alive_connection_is_retried_once() -> None:
    async def run() -> int:
        async with ScriptedServer([stream_reply(keep=False), stream_reply()]) as server:
            conn = Http1Connection("127.0.0.1", server.port, headers={})
            for _ in range(2):
                got, sink = collect()
                assert (await conn.post_stream("/x", b"{}", sink))[0] == 200
                assert b"[DONE]" in b"".join(got)
            await conn.aclose()
            return server.connections

    assert asyncio.run(run()) == 2


def test_a_body_cut_short_is_an_error() -> None:
    async def run() -> None:
        async with ScriptedServer([stream_reply(cut=True)]) as server:
            conn = Http1Connection("127.0.0.1", server.port, headers={})
            _, sink = collect()
            with pytest.raises(Http1Error, match="mid-response"):
                await conn.post_stream("/x", b"{}", sink)

    asyncio.run(run())


def test_error_status_returns_the_body_and_keeps_the_connection() -> None:
    async def error(writer: asyncio.StreamWriter, body: bytes) -> bool:
        data = json.dumps({"error": {"message": "bad model"}}).encode()
        writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: %d\r\n\r\n%s" % (len(data), data))
        return True

    async def run() -> tuple[list[tuple[int, bytes]], int]:
        async with ScriptedServer([error, stream_reply()]) as server:
            conn = Http1Connection("127.0.0.1", server.port, headers={})
            answers = [await conn.post_stream("/x", b"{}", collect()[1]) for _ in range(2)]
            await conn.aclose()
            return answers, server.connections

    answers, connections = asyncio.run(run())
    assert answers[0] == (404, b'{"error": {"message": "bad model"}}')
    assert answers[1] == (200, b"")
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

    async def run() -> Any:
        async with ScriptedServer([old_style]) as server:
            endpoint = Endpoint(f"http://127.0.0.1:{server.port}")
            conn = Http1Connection("127.0.0.1", server.port, headers={})
            record = await stream_request(
                None,  # type: ignore[arg-type]  # the lean path never touches httpx
                endpoint,
                {"model": "m", "max_tokens": 2},
                prompt_id="p",
                level_start=0.0,
                conn=conn,
            )
            await conn.aclose()
            return record

    record = asyncio.run(run())
    assert record.success, record.error
    assert (record.output_tokens, record.chunks, record.prompt_tokens) == (2, 1, 1)


def test_lean_only_for_plain_http_without_a_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    assert lean_target("http://127.0.0.1:8000/v1") == ("127.0.0.1", 8000)
    assert lean_target("http://[::1]") == ("::1", 80)
    assert lean_target("https://127.0.0.1:8000") is None
    monkeypatch.setenv("http_proxy", "http://10.200.9.9:3128")
    assert lean_target("http://10.200.0.10:30000") is None  # httpx would use the proxy
    monkeypatch.setenv("no_proxy", "10.200.0.10")
    assert lean_target("http://10.200.0.10:30000") == ("10.200.0.10", 30000)
