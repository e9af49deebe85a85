"""The HTTPS front of the double: ``/api2/json/...`` requests in, PVE-shaped answers out.

Each request is matched to a schema path template and method (501 ``Method '...' not
implemented`` otherwise, as PVE answers), authenticated, validated against the method's parameter
schema, then handed to the handler registered for it. Replies are ``{"data": ...}``; errors carry
the message in the HTTP reason phrase and, for parameter errors, an ``errors`` object.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from dflashops.lab.pve import firewall, lxc, lxcpower, node  # noqa: F401  (importing registers handlers)
from dflashops.lab.pve.apischema import ApiSchema
from dflashops.lab.pve.auth import Caller
from dflashops.lab.pve.errors import ApiError
from dflashops.lab.pve.routing import ROUTES, Request
from dflashops.lab.pve.state import DoubleState
from dflashops.lab.pve.validate import validate_params

log = logging.getLogger(__name__)

API_PREFIX = "/api2/json"
MAX_BODY = 1 << 20


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    body: dict[str, Any]


class PveApi:
    """Routes one request through schema match, authentication, validation and its handler."""

    def __init__(self, state: DoubleState, schema: ApiSchema) -> None:
        self.state = state
        self.schema = schema

    def handle(
        self, method: str, path: str, params: dict[str, str], headers: dict[str, str]
    ) -> Response:
        try:
            data = self._dispatch(method, path, params, headers)
        except ApiError as exc:
            body: dict[str, Any] = {"data": None}
            if exc.errors:
                body["errors"] = exc.errors
            return Response(exc.status, exc.message, body)
        except Exception as exc:
            log.exception("PVE double: %s %s failed", method, path)
            return Response(
                500, f"internal error in the dflashops PVE double: {exc}", {"data": None}
            )
        return Response(200, "OK", {"data": data})

    def _dispatch(
        self, method: str, path: str, params: dict[str, str], headers: dict[str, str]
    ) -> Any:
        match = self.schema.match(path)
        info = self.schema.method(match.template, method) if match else None
        if match is None or info is None:
            raise ApiError(501, f"Method '{method} {path}' not implemented")
        if (info.get("permissions") or {}).get("user") == "world":
            caller = Caller("")
        else:
            caller = self.state.authenticator.authenticate(method, headers)
        typed = validate_params(info.get("parameters") or {}, {**params, **match.params})
        handler = ROUTES.get((method, match.template))
        if handler is None:
            raise ApiError(
                501, f"Method '{method} {path}' not implemented by the dflashops PVE double"
            )
        return handler(Request(self.state, caller, typed))


def _merge(pairs: list[tuple[str, str]], into: dict[str, str]) -> None:
    # pve-http-server joins repeated parameters with NUL (list formats split on it)
    for key, value in pairs:
        into[key] = f"{into[key]}\0{value}" if key in into else value


def _json_params(body: bytes) -> list[tuple[str, str]]:
    decoded = json.loads(body or b"{}")
    if not isinstance(decoded, dict):
        raise ValueError("JSON body must be an object")
    pairs: list[tuple[str, str]] = []
    for key, value in decoded.items():
        values = value if isinstance(value, list) else [value]
        for item in values:
            text = str(int(item)) if isinstance(item, bool) else str(item)
            pairs.append((str(key), text))
    return pairs


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pve-api-daemon/3.0"
    sys_version = ""
    timeout = 60
    # a reply is two writes (headers, then body): with Nagle's algorithm the body waits for the
    # client's delayed ACK of the headers, 40 ms on every request of a keep-alive connection,
    # which pveproxy never makes anyone wait
    disable_nagle_algorithm = True
    server: _HttpsServer

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(Response(413, "request too large", {"data": None}))
            return
        body = self.rfile.read(length) if length else b""
        if url.path != API_PREFIX and not url.path.startswith(API_PREFIX + "/"):
            self._reply(Response(501, f"Unknown path '{url.path}'", {"data": None}))
            return
        path = "/" + "/".join(unquote(seg) for seg in url.path[len(API_PREFIX) :].split("/") if seg)
        params: dict[str, str] = {}
        _merge(parse_qsl(url.query, keep_blank_values=True), params)
        try:
            if "json" in (self.headers.get("Content-Type") or ""):
                _merge(_json_params(body), params)
            else:
                _merge(parse_qsl(body.decode(), keep_blank_values=True), params)
        except ValueError as exc:
            self._reply(Response(400, f"unable to parse request body - {exc}", {"data": None}))
            return
        headers = {key.lower(): value for key, value in self.headers.items()}
        self._reply(self.server.api.handle(method, path, params, headers))

    def _reply(self, response: Response) -> None:
        payload = json.dumps(response.body).encode()
        reason = " ".join(response.reason.split()) or "error"
        self.send_response(response.status, reason.encode("latin-1", "replace").decode("latin-1"))
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "max-age=0")
        self.send_header("Pragma", "no-cache")
        self.end_headers()
        self.wfile.write(payload)


class _HttpsServer(ThreadingHTTPServer):
    """A threading HTTP server that does the TLS handshake in each request's own thread."""

    daemon_threads = True
    block_on_close = False
    # socketserver listens with a backlog of 5: a client opening a connection per thread (a
    # command over 50 containers) would see SYNs dropped and retried a second later
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], api: PveApi, context: ssl.SSLContext) -> None:
        self.api = api
        self.ssl_context = context
        super().__init__(address, _RequestHandler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        request.settimeout(_RequestHandler.timeout)
        try:
            tls = self.ssl_context.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", client_address, exc)
            return
        try:
            _RequestHandler(tls, client_address, self)
        finally:
            with contextlib.suppress(OSError):
                tls.shutdown(socket.SHUT_RDWR)
            tls.close()


class HttpsFrontend:
    """Serves a :class:`PveApi` over HTTPS in a background thread."""

    def __init__(self, api: PveApi, context: ssl.SSLContext, host: str, port: int) -> None:
        self._server = _HttpsServer((host, port), api, context)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True,
            name="pve-double-https",
        )  # fmt: skip

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
