"""A stand-in for a vLLM OpenAI server, run as its own process so a test can kill it by pid.

``python -m tests.support.fake_openai_server --events FILE [--port P] [--hang-from N]`` serves
``/v1/models``, ``/version``, ``/metrics`` (vLLM's spec-decode counters, advanced by every
request served) and streamed ``/v1/chat/completions`` whose chunks carry several tokens each,
then a usage-only chunk and ``[DONE]``. Standard library only.

``--hang-from N``: the N-th POST and every later one never answer, so that a test knows which
requests were in flight when it kills the process. ``--die-on-scrape N``: the process exits at
once (its sockets closed by the kernel, as in a crash) when the N-th ``/metrics`` GET arrives.
The process appends one line per event to
``--events``: ``listening PORT`` once bound, ``hanging N`` as the N-th POST arrives; a test
polls that file rather than the pipe, so every wait has a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL = "fake"
K = 4  # drafts per verify step
TOKENS = 13  # every reply's length: the first token, then 4 verify steps of 3
TOKENS_PER_CHUNK = 3  # 1 + accepted per verify step: acceptance length 3
CHUNK_DELAY_S = 0.005


class Engine:
    """The counters and the request count one process shares across its handler threads."""

    def __init__(self, events: Path, hang_from: int | None, die_on_scrape: int | None) -> None:
        self.events = events
        self.hang_from = hang_from
        self.die_on_scrape = die_on_scrape
        self.lock = threading.Lock()
        self.posts = self.scrapes = 0
        self.drafts = self.draft_tokens = self.accepted = self.generated = 0
        self.per_pos = [0] * K

    def event(self, line: str) -> None:
        with self.lock, self.events.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    def next_post(self) -> int:
        with self.lock:
            self.posts += 1
            return self.posts

    def scrape(self) -> None:
        with self.lock:
            self.scrapes += 1
            dying = self.scrapes == self.die_on_scrape
        if dying:
            self.event(f"dying {self.scrapes}")
            os._exit(1)

    def account(self, sizes: list[int]) -> None:
        with self.lock:
            for size in sizes[1:]:
                self.drafts += 1
                self.draft_tokens += K
                self.accepted += size - 1
                for pos in range(size - 1):
                    self.per_pos[pos] += 1
            self.generated += sum(sizes)

    def metrics(self) -> str:
        labels = f'engine="0",model_name="{MODEL}"'
        with self.lock:
            lines = [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(self.drafts)}",
                "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(self.draft_tokens)}",
                "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(self.accepted)}",
                "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
                *(
                    f"vllm:spec_decode_num_accepted_tokens_per_pos_total"
                    f'{{{labels},position="{pos}"}} {float(count)}'
                    for pos, count in enumerate(self.per_pos)
                ),
                "# TYPE vllm:generation_tokens_total counter",
                f"vllm:generation_tokens_total{{{labels}}} {float(self.generated)}",
            ]
        return "\n".join(lines) + "\n"


def handler(engine: Engine) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # each chunk its own packet, as a streaming server sends

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                listing = {"data": [{"id": MODEL, "object": "model", "max_model_len": 4096}]}
                self._reply(200, json.dumps(listing).encode(), "application/json")
            elif self.path == "/version":
                self._reply(200, b'{"version": "0.32.0"}', "application/json")
            elif self.path == "/metrics":
                engine.scrape()
                self._reply(200, engine.metrics().encode(), "text/plain; version=0.0.4")
            else:
                self._reply(404, b'{"detail": "Not Found"}', "application/json")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path != "/v1/chat/completions":
                self._reply(404, b'{"detail": "Not Found"}', "application/json")
                return
            number = engine.next_post()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._send({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
            if engine.hang_from is not None and number >= engine.hang_from:
                engine.event(f"hanging {number}")
                threading.Event().wait()  # until the process is killed
            sizes = [1]
            while sum(sizes) < TOKENS:
                sizes.append(min(TOKENS_PER_CHUNK, TOKENS - sum(sizes)))
            for index, size in enumerate(sizes):
                time.sleep(CHUNK_DELAY_S)
                finish = "length" if index == len(sizes) - 1 else None
                choice = {"index": 0, "delta": {"content": "w " * size}, "finish_reason": finish}
                self._send({"id": "x", "choices": [choice]})
            engine.account(sizes)
            usage = {"prompt_tokens": 8, "completion_tokens": TOKENS}
            self._send({"id": "x", "choices": [], "usage": usage})
            self._send("[DONE]")
            self.wfile.write(b"0\r\n\r\n")

        def _send(self, event: object) -> None:
            data = f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--hang-from", type=int)
    parser.add_argument("--die-on-scrape", type=int)
    args = parser.parse_args()
    engine = Engine(args.events, args.hang_from, args.die_on_scrape)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), handler(engine))
    httpd.daemon_threads = True
    engine.event(f"listening {httpd.server_address[1]}")
    httpd.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
