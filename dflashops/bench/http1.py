"""A lean HTTP/1.1 client for one thing: streamed POSTs to a plain-http inference server.

Why not httpx for the streams: under a token stream httpx (through httpcore and h11) turns every
HTTP chunk into several Python-level events and then into text and lines, ~80 µs of CPU per
token on this project's 2-core machines, 2-3x what ``vllm bench serve``'s aiohttp loop spends.
The benchmark client shares the machine with the server, so here each socket read is handed
on as it arrives (one timestamp per read, as aiohttp's ``iter_any``), chunked framing is undone
with ``bytes.find``, and the reply is parsed inside the event loop's ``data_received`` callback:
no coroutine wakes up per read. Everything else (``/v1/models``, ``/metrics``, https, proxies)
stays on httpx.

One ``Http1Connection`` per worker: requests on it are sequential and the connection is kept
alive between them. A request on a reused connection that the server closed meanwhile (no
status line came back) is sent once more on a fresh one, as httpx does.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from urllib.parse import urlsplit
from urllib.request import getproxies, proxy_bypass

MAX_HEAD_BYTES = 64 * 1024
MAX_ERROR_BODY = 64 * 1024
# after the stream's last event, how long to wait for the end of the HTTP body (keep-alive)
DRAIN_S = 2.0

Sink = Callable[[bytes, float], bool]
"""Gets each piece of response body and its arrival time; True stops feeding (stream done)."""


class Http1Error(Exception):
    """The connection failed or the server broke HTTP/1.1 framing."""


def lean_target(url: str) -> tuple[str, int] | None:
    """(host, port) when ``url`` can use the lean client: plain http and no proxy for it."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return None
    proxies = getproxies()
    if proxies.get("http") or proxies.get("all"):
        with contextlib.suppress(Exception):
            if not proxy_bypass(parts.hostname):
                return None  # httpx honours the proxy (trust_env); so must we
    return parts.hostname, parts.port or 80


class Http1Connection:
    """A keep-alive connection for sequential streamed POSTs."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        headers: Mapping[str, str],
        connect_timeout_s: float = 10.0,
    ) -> None:
        self.host = host
        self.port = port
        self.connect_timeout_s = connect_timeout_s
        authority = f"[{host}]" if ":" in host else host
        if port != 80:
            authority = f"{authority}:{port}"
        fixed = {
            "Host": authority,
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            "User-Agent": "dflashops-bench",
            **headers,
        }
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._protocol: _Protocol | None = None

    async def aclose(self) -> None:
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.close()

    async def post_stream(self, path: str, body: bytes, sink: Sink) -> tuple[int, bytes]:
        """POST ``body``; a 200 reply's body goes to ``sink`` as it arrives and ``(200, b"")``
        is returned; any other status returns ``(status, body)``. ``Http1Error`` on failure."""
        request = (
            f"POST {path} HTTP/1.1\r\n{self._fixed}Content-Length: {len(body)}\r\n\r\n"
        ).encode("latin-1") + body
        reused = self._protocol is not None and self._protocol.usable()
        try:
            return await self._exchange(request, sink)
        except _StaleConnection:
            await self.aclose()
            if not reused:
                raise Http1Error("the server closed the connection without replying") from None
            return await self._exchange(request, sink)
        except BaseException:
            await self.aclose()
            raise

    async def _exchange(self, request: bytes, sink: Sink) -> tuple[int, bytes]:
        protocol = await self._open()
        exchange = protocol.start(request, sink)
        status, data = await exchange.stopped
        if not exchange.finished.done():
            # the stream ended ([DONE]) before its HTTP body did: the terminating chunk
            # normally follows at once; wait briefly so the connection can be reused
            try:
                await asyncio.wait_for(asyncio.shield(exchange.finished), DRAIN_S)
            except (TimeoutError, Http1Error):
                await self.aclose()
                return status, data
        if exchange.finished.exception() is not None or not exchange.keep_alive:
            await self.aclose()
        return status, data

    async def _open(self) -> _Protocol:
        if self._protocol is not None and self._protocol.usable():
            return self._protocol
        await self.aclose()
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(
                loop.create_connection(_Protocol, self.host, self.port),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise Http1Error(f"connect timed out after {self.connect_timeout_s:g} s") from None
        except OSError as exc:
            raise Http1Error(f"cannot connect: {exc.strerror or exc}") from None
        self._protocol = protocol
        return protocol


class _Exchange:
    """One request on a connection: parses the reply as its bytes arrive (in the loop's
    callback, so no coroutine wakes up per read)."""

    def __init__(self, sink: Sink) -> None:
        loop = asyncio.get_running_loop()
        self.sink = sink
        self.stopped: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()
        self.finished.add_done_callback(_retrieve)
        self.head = b""
        self.status = 0
        self.body: _Body | None = None
        self.keep_alive = True
        self.error_parts: list[bytes] = []
        self.error_size = 0
        self.sinking = True
        self.got_bytes = False

    def data(self, data: bytes, now: float) -> None:
        self.got_bytes = True
        if self.body is None:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > MAX_HEAD_BYTES:
                    self.fail(Http1Error("response head too large"))
                return
            self.status, headers = _parse_head(self.head[: end + 4])
            self.keep_alive = headers.get("connection", "").lower() != "close"
            self.body = _Body(headers)
            data, self.head = self.head[end + 4 :], b""
            self.keep_alive = self.keep_alive and not self.body.until_close
            if self.body.done:
                self._end()
                return
            if not data:
                return
        payload = self.body.feed(data)
        if self.status != 200:
            if self.error_size < MAX_ERROR_BODY:
                self.error_parts.append(payload)
                self.error_size += len(payload)
        elif payload and self.sinking and self.sink(payload, now):
            self.sinking = False
            if not self.stopped.done():
                self.stopped.set_result((self.status, b""))
        if self.body.done:
            self._end()

    def eof(self) -> None:
        if self.body is not None and self.body.until_close:
            self._end()
        elif not self.got_bytes:
            self.fail(_StaleConnection())
        else:
            self.fail(Http1Error("the server closed the connection mid-response"))

    def fail(self, exc: BaseException) -> None:
        for future in (self.stopped, self.finished):
            if not future.done():
                future.set_exception(exc)

    def _end(self) -> None:
        if not self.stopped.done():
            error = b"".join(self.error_parts) if self.status != 200 else b""
            self.stopped.set_result((self.status, error[:MAX_ERROR_BODY]))
        if not self.finished.done():
            self.finished.set_result(None)


class _Protocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.lost = False

    def usable(self) -> bool:
        return not self.lost and self.transport is not None and not self.transport.is_closing()

    def start(self, request: bytes, sink: Sink) -> _Exchange:
        assert self.transport is not None
        self.exchange = _Exchange(sink)
        self.transport.write(request)
        return self.exchange

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.lost = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        exchange = self.exchange
        if exchange is None or exchange.finished.done():
            self.close()  # bytes nobody asked for: the connection is out of step
            return
        try:
            exchange.data(data, now)
        except Exception as exc:  # raised in a loop callback: hand it to the waiting request
            exchange.fail(exc)
            self.close()

    def eof_received(self) -> bool:
        self.lost = True
        if self.exchange is not None and not self.exchange.finished.done():
            self.exchange.eof()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.exchange is not None and not self.exchange.finished.done():
            if exc is None:
                self.exchange.eof()
            else:
                self.exchange.fail(Http1Error(f"connection lost: {exc}"))


def _retrieve(future: asyncio.Future[None]) -> None:
    # a failure after the stream already ended is handled by dropping the connection; reading
    # it here keeps asyncio from logging "exception was never retrieved"
    if not future.cancelled():
        future.exception()


class _StaleConnection(Exception):
    """No status line came back: a kept-alive connection the server had closed."""


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise Http1Error(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


class _Body:
    """Undoes the body's framing: chunked, Content-Length, or until the connection closes."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self.left = int(length) if not self.chunked and length and length.isdigit() else None
        self.until_close = not self.chunked and self.left is None
        self.done = self.left == 0
        self._raw = b""
        self._chunk_left = 0  # payload bytes still due in the current chunk
        self._crlf_left = 0  # bytes of the CRLF after the current chunk's payload

    def feed(self, data: bytes) -> bytes:
        """The payload bytes in ``data`` (framing removed)."""
        if not self.chunked:
            if self.left is not None:
                data = data[: self.left]
                self.left -= len(data)
                self.done = self.left == 0
            return data
        raw = self._raw + data if self._raw else data
        out: list[bytes] = []
        pos = 0
        end = len(raw)
        while pos < end and not self.done:
            if self._chunk_left:
                take = min(self._chunk_left, end - pos)
                out.append(raw[pos : pos + take])
                pos += take
                self._chunk_left -= take
                if self._chunk_left == 0:
                    self._crlf_left = 2
                continue
            if self._crlf_left:
                take = min(self._crlf_left, end - pos)
                pos += take
                self._crlf_left -= take
                continue
            line_end = raw.find(b"\r\n", pos)
            if line_end < 0:
                break
            size_text = raw[pos:line_end].split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise Http1Error(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                # last chunk: trailers (usually none) end with an empty line
                trailer_end = raw.find(b"\r\n\r\n", line_end)
                if raw.startswith(b"\r\n", line_end + 2):
                    pos, self.done = line_end + 4, True
                elif trailer_end >= 0:
                    pos, self.done = trailer_end + 4, True
                else:
                    break
                continue
            self._chunk_left = size
            pos = line_end + 2
        self._raw = raw[pos:] if not self.done else b""
        return b"".join(out) if len(out) != 1 else out[0]
