"""``up``'s smoke step against a real HTTP server that replays what real engines exposed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from dflashops.playbook.load import load_playbook
from dflashops.up.record import UpError
from dflashops.up.smoke import smoke_request

REPO = Path(__file__).resolve().parents[2]
METRICS = REPO / "tests" / "fixtures" / "metrics"


@pytest.fixture
def served() -> Iterator[tuple[str, dict[str, str]]]:
    """A server answering one chat completion and ``/metrics`` with ``state["metrics"]``."""
    state = {"metrics": ""}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def reply(self, body: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self.reply(state["metrics"].encode(), "text/plain")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            answer = {
                "choices": [{"message": {"content": "General relativity"}}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 48},
            }
            self.reply(json.dumps(answer).encode(), "application/json")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def sglang_book(tmp_path: Path, method: str) -> Path:
    path = tmp_path / "sglang.yaml"
    spec = "" if method == "none" else "  num_speculative_tokens: 4\n"
    path.write_text(
        "name: s\nmodel: {path: /opt/lab/models/tiny-qwen3, served_name: tiny}\n"
        f"drafter: {{method: {method}}}\nengine: {{name: sglang, version: 0.5.16}}\n"
        f"server:\n  device: cpu\n{spec}"
    )
    return path


def test_an_sglang_server_that_speculated_passes_with_its_counts(
    served: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, state = served
    state["metrics"] = (METRICS / "real-sglang-0.5.16-cpu-ngram-after.txt").read_text()

    out = smoke_request(url, load_playbook(sglang_book(tmp_path, "ngram")))

    assert out.reply == "General relativity"
    assert out.spec_decode is not None and out.spec_decode.num_drafts == 364


def test_an_sglang_server_that_did_not_speculate_is_an_error(
    served: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    url, state = served
    state["metrics"] = (METRICS / "real-sglang-0.5.16-cpu-none-after.txt").read_text()

    with pytest.raises(UpError, match="exposes no sglang:spec_\\* metrics: speculation is off"):
        smoke_request(url, load_playbook(sglang_book(tmp_path, "ngram")))
