"""Emptying the prefix cache between bench levels: vLLM's path, else SGLang's, over real HTTP."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dflashops.bench.endpoint import Endpoint
from dflashops.bench.server_api import make_client, reset_prefix_cache


def serve(answers: dict[str, int]) -> tuple[ThreadingHTTPServer, list[str]]:
    """A server answering POST ``path`` with ``answers[path]`` (404 for any other); it records
    the paths asked, query included."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            asked.append(self.path)
            code = answers.get(self.path.partition("?")[0], 404)
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, asked


@pytest.fixture
def running() -> Iterator[list[ThreadingHTTPServer]]:
    servers: list[ThreadingHTTPServer] = []
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def reset(
    answers: dict[str, int], running: list[ThreadingHTTPServer]
) -> tuple[bool | None, list[str]]:
    server, asked = serve(answers)
    running.append(server)
    endpoint = Endpoint(f"http://127.0.0.1:{server.server_address[1]}")

    async def call() -> bool | None:
        async with make_client(endpoint, 1) as client:
            return await reset_prefix_cache(client, endpoint)

    return asyncio.run(call()), asked


def test_vllm_s_reset_is_used_when_served(running: list[ThreadingHTTPServer]) -> None:
    assert reset({"/reset_prefix_cache": 200}, running) == (True, ["/reset_prefix_cache"])


def test_sglang_s_flush_waits_for_idle(running: list[ThreadingHTTPServer]) -> None:
    done, asked = reset({"/flush_cache": 200}, running)
    assert done is True
    assert asked == ["/reset_prefix_cache", "/flush_cache?timeout=30"]


def test_a_refused_flush_is_a_failure_and_no_path_is_unsupported(
    running: list[ThreadingHTTPServer],
) -> None:
    assert reset({"/flush_cache": 400}, running)[0] is False  # requests still running
    assert reset({}, running)[0] is None
