"""Where a benchmark sends its requests, and how an HTTP failure reads in one line."""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from typing import Literal

Api = Literal["chat", "completions"]
API_PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
CONNECT_TIMEOUT_S = 10.0
# what a lost connection's errno means to an operator (the libraries' own words vary: httpx says
# "All connection attempts failed" for a refused connection)
_LOST = {
    errno.ECONNREFUSED: "connection refused",
    errno.ECONNRESET: "connection reset",
    errno.ECONNABORTED: "connection aborted",
    errno.EPIPE: "connection closed",
    errno.ETIMEDOUT: "connection timed out",
    errno.EHOSTUNREACH: "no route to host",
    errno.ENETUNREACH: "network unreachable",
}


@dataclass(frozen=True)
class Endpoint:
    """Where to send requests. ``base_url`` is the server root (a trailing ``/v1`` is dropped)."""

    base_url: str
    model: str | None = None
    api: Api = "chat"
    api_key: str | None = None
    timeout_s: float = 900.0

    def root(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1")

    def url(self, path: str) -> str:
        return self.root() + path

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def error_body_text(content: bytes) -> str:
    """The message of an error reply (OpenAI's ``{"error": {"message"}}``, FastAPI's
    ``{"detail"}``, or the text itself), on one line."""
    try:
        body = json.loads(content)
    except ValueError:
        return " ".join(content.decode("utf-8", errors="replace").split())[:200]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error.get("detail") or error)[:200]
        return str(body.get("message") or body.get("detail") or error)[:200]
    return str(body)[:200]


def one_line(exc: Exception) -> str:
    """An exception as ``Type: message`` on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def connection_failure(exc: BaseException) -> str:
    """A failed connection in an operator's words (``connection refused``), from the first
    errno in the exception's chain; else the exception as ``Type: message``."""
    seen: BaseException | None = exc
    while seen is not None:
        code = getattr(seen, "errno", None)
        if isinstance(code, int) and code in _LOST:
            return _LOST[code]
        if isinstance(seen, TimeoutError):
            return "timed out"
        seen = seen.__cause__ or seen.__context__
    return one_line(exc) if isinstance(exc, Exception) else type(exc).__name__
