"""A server whose ``/metrics`` counters advance by known steps, one step per scrape: what a
watch window must compute is then exact.

Before answering its n-th scrape the server adds ``steps[n - 1]`` (the last step repeats) to
its counters and sets its gauges to that step's, so the window between scrape n - 1 and n holds
exactly step n. The counters start from ``BASE_*`` (a server that has been up a while: a window
is a difference, never the total).

``engine="vllm"``: vLLM's exposition (``# HELP``/``# TYPE``, ``_total`` and ``_created``
samples, ``engine``/``model_name`` labels, the spec-decode counters); ``"sglang"``: SGLang's
names and no spec-decode counters; ``"none"``: 404 on ``/metrics`` (SGLang without
``--enable-metrics``). ``hang_from``: the n-th scrape and every later one are never answered.

In a test: ``with FakeMetricsServer(steps) as server: server.url``. As its own process, so a
test can kill it by pid: ``python -m tests.support.fake_metrics_server --events FILE [--port P]
[--engine E]``; it appends ``listening PORT`` to ``--events`` once bound. Standard library only.
"""

from __future__ import annotations

import argparse
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

MODEL = "fake"
BASE_GENERATION_TOKENS = 100_000
BASE_DRAFTS = 20_000
CREATED = 1.7962163890e09  # the process start the _created samples report

Engine = Literal["vllm", "sglang", "none"]


@dataclass(frozen=True)
class Step:
    """What happens between two scrapes. ``accepted_per_position[i]``: drafts whose token at
    position i was accepted; every draft proposes ``len(accepted_per_position)`` tokens."""

    generation_tokens: int = 200
    drafts: int = 50
    accepted_per_position: tuple[int, ...] = (45, 35, 20, 10)
    running: int = 4
    waiting: int = 0


@dataclass
class Counters:
    generation_tokens: int = BASE_GENERATION_TOKENS
    drafts: int = BASE_DRAFTS
    draft_tokens: int = 4 * BASE_DRAFTS
    per_position: list[int] = field(
        default_factory=lambda: [BASE_DRAFTS * share // 10 for share in (9, 7, 4, 2)]
    )
    running: int = 0
    waiting: int = 0

    def advance(self, step: Step) -> None:
        self.generation_tokens += step.generation_tokens
        self.drafts += step.drafts
        self.draft_tokens += step.drafts * len(step.accepted_per_position)
        self.per_position += [0] * (len(step.accepted_per_position) - len(self.per_position))
        for pos, accepted in enumerate(step.accepted_per_position):
            self.per_position[pos] += accepted
        self.running, self.waiting = step.running, step.waiting


class MetricsState:
    """The counters and the scrape count, shared across the handler threads."""

    def __init__(self, steps: list[Step], engine: Engine, hang_from: int | None) -> None:
        self.steps = steps or [Step()]
        self.engine = engine
        self.hang_from = hang_from
        self.counters = Counters()
        self.scrapes = 0
        self.lock = threading.Lock()
        self.released = threading.Event()  # set on stop: hung handlers end

    def scrape(self) -> str | None:
        """The next exposition; None when this scrape hangs (until the server stops)."""
        with self.lock:
            self.scrapes += 1
            if self.hang_from is not None and self.scrapes >= self.hang_from:
                return None
            self.counters.advance(self.steps[min(self.scrapes, len(self.steps)) - 1])
            return exposition(self.counters, self.engine)


def exposition(counters: Counters, engine: Engine) -> str:
    if engine == "sglang":
        labels = f'model_name="{MODEL}"'
        return "\n".join(
            [
                *_family("sglang:generation_tokens", "counter", labels, counters.generation_tokens),
                *_family("sglang:num_running_reqs", "gauge", labels, counters.running),
                *_family("sglang:num_queue_reqs", "gauge", labels, counters.waiting),
                "",
            ]
        )
    labels = f'engine="0",model_name="{MODEL}"'
    per_position = [
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{pos}"}} '
        f"{float(count)}"
        for pos, count in enumerate(counters.per_position)
    ]
    return "\n".join(
        [
            *_family("vllm:num_requests_running", "gauge", labels, counters.running),
            *_family("vllm:num_requests_waiting", "gauge", labels, counters.waiting),
            *_family("vllm:spec_decode_num_drafts", "counter", labels, counters.drafts),
            *_family("vllm:spec_decode_num_draft_tokens", "counter", labels, counters.draft_tokens),
            *_family(
                "vllm:spec_decode_num_accepted_tokens",
                "counter",
                labels,
                sum(counters.per_position),
            ),
            "# HELP vllm:spec_decode_num_accepted_tokens_per_pos Accepted tokens per position.",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
            *per_position,
            *_family("vllm:generation_tokens", "counter", labels, counters.generation_tokens),
            "",
        ]
    )


def _family(name: str, kind: str, labels: str, value: int) -> list[str]:
    sample = f"{name}_total" if kind == "counter" else name
    lines = [
        f"# HELP {name} {name.partition(':')[2].replace('_', ' ')}.",
        f"# TYPE {name} {kind}",
        f"{sample}{{{labels}}} {float(value)}",
    ]
    if kind == "counter":
        lines.append(f"{name}_created{{{labels}}} {CREATED}")
    return lines


def handler(state: MetricsState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path != "/metrics" or state.engine == "none":
                self._reply(404, b'{"detail": "Not Found"}', "application/json")
                return
            text = state.scrape()
            if text is None:
                state.released.wait()
                return
            self._reply(200, text.encode(), "text/plain; version=0.0.4; charset=utf-8")

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


class FakeMetricsServer:
    """The server on 127.0.0.1 in a thread of this process; ``stop`` closes its port."""

    def __init__(
        self,
        steps: list[Step] | None = None,
        *,
        engine: Engine = "vllm",
        hang_from: int | None = None,
        port: int = 0,
    ) -> None:
        self.state = MetricsState(list(steps or []), engine, hang_from)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler(self.state))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def scrapes(self) -> int:
        return self.state.scrapes

    def __enter__(self) -> FakeMetricsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.state.released.set()
        if self.thread.is_alive():
            self.httpd.shutdown()
            self.thread.join(timeout=5.0)
        self.httpd.server_close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--engine", choices=["vllm", "sglang", "none"], default="vllm")
    args = parser.parse_args()
    server = FakeMetricsServer(engine=args.engine, port=args.port)
    with args.events.open("a", encoding="utf-8") as events:
        events.write(f"listening {server.httpd.server_address[1]}\n")
    server.httpd.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
