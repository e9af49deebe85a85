"""The streaming bench client against a real local HTTP server (127.0.0.1, real sockets, SSE).

``FakeOpenAIServer`` speaks the slice of vLLM's OpenAI API the client uses: ``/v1/models`` (with
``max_model_len``), ``/version``, ``/metrics`` (vLLM's spec-decode counters, advanced by every
request it serves) and streamed ``/v1/chat/completions`` / ``/v1/completions`` whose chunks carry
several tokens each, as under speculative decoding, followed by a usage-only chunk and ``[DONE]``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from dflashops.bench.client import (
    PROMPT_TOKEN_RESERVE,
    RequestOptions,
    cap_max_tokens,
    run_requests,
)
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.level import refused_by_server
from dflashops.bench.models import RequestRecord
from dflashops.bench.runner import run_benchmark_sync
from dflashops.bench.server_api import fetch_server_info, make_client
from dflashops.bench.settings import BenchSettings
from dflashops.bench.stopped import WarmupRefused
from dflashops.bench.workload import REFERENCE_PROMPT, load_workload
from dflashops.errors import BenchmarkError

K = 4  # the fake server's num_speculative_tokens
# vLLM 0.26's reply to a chat request for a model whose tokenizer has no chat template (seen on
# the H100 with the Qwen3-8B-shaped target, benchmarks/results/gpu-h100-sglang-20261205)
NO_CHAT_TEMPLATE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide a "
    "chat template if the tokenizer does not define one."
)


class FakeOpenAIServer:
    """A threaded HTTP/1.1 server streaming SSE with chunked transfer encoding."""

    def __init__(
        self,
        *,
        tokens_per_chunk: int = 3,
        natural_tokens: int = 10,
        first_delay: float = 0.05,
        chunk_delay: float = 0.02,
        max_model_len: int | None = 512,
        metrics: bool = True,
        model: str = "tiny",
        server_info: dict[str, Any] | None = None,
        server_info_path: str = "/server_info",
        chat_template: bool = True,
    ) -> None:
        self.tokens_per_chunk = tokens_per_chunk
        self.natural_tokens = natural_tokens
        self.first_delay = first_delay
        self.chunk_delay = chunk_delay
        self.max_model_len = max_model_len
        self.metrics = metrics
        self.model = model
        # SGLang's reply (it has no /version): given, /version answers 404
        self.server_info = server_info
        self.server_info_path = server_info_path
        # False: a base model's tokenizer, which the chat API refuses (vLLM 0.26's own reply)
        self.chat_template = chat_template
        self.payloads: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.in_flight = 0
        self.max_in_flight = 0
        self.drafts = self.draft_tokens = self.accepted = self.generated = 0
        self.per_pos = [0] * K
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def metrics_text(self) -> str:
        labels = f'engine="0",model_name="{self.model}"'
        lines = [
            "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
            "# TYPE vllm:spec_decode_num_drafts_total counter",
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(self.drafts)}",
            "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(self.draft_tokens)}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(self.accepted)}",
            "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
            *(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{i}"}} '
                f"{float(n)}"
                for i, n in enumerate(self.per_pos)
            ),
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{labels}}} {float(self.generated)}",
        ]
        return "\n".join(lines) + "\n"

    def chunk_sizes(self, tokens: int) -> list[int]:
        """The first token comes from prefill, then each verify step emits accepted + 1."""
        sizes = [1]
        while sum(sizes) < tokens:
            sizes.append(min(self.tokens_per_chunk, tokens - sum(sizes)))
        return sizes

    def account(self, sizes: list[int]) -> None:
        with self.lock:
            for size in sizes[1:]:
                self.drafts += 1
                self.draft_tokens += K
                self.accepted += size - 1
                for pos in range(size - 1):
                    self.per_pos[pos] += 1
            self.generated += sum(sizes)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _json(self, status: int, body: object) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    entry: dict[str, Any] = {"id": server.model, "object": "model"}
                    if server.max_model_len is not None:
                        entry["max_model_len"] = server.max_model_len
                    self._json(200, {"object": "list", "data": [entry]})
                elif self.path == "/version" and server.metrics and not server.server_info:
                    self._json(200, {"version": "0.32.0"})
                elif self.path == server.server_info_path and server.server_info:
                    self._json(200, server.server_info)
                elif self.path == "/metrics" and server.metrics:
                    data = server.metrics_text().encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                else:
                    self._json(404, {"detail": "Not Found"})

            def _send(self, obj: object) -> None:
                data = f"data: {obj if isinstance(obj, str) else json.dumps(obj)}\n\n".encode()
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.payloads.append(payload)
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._stream(payload)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _stream(self, payload: dict[str, Any]) -> None:
                chat = self.path == "/v1/chat/completions"
                text = payload["messages"][-1]["content"] if chat else payload["prompt"]
                if "FAIL" in text:
                    self._json(400, {"error": {"message": "bad request: FAIL", "code": 400}})
                    return
                if chat and not server.chat_template:
                    self._json(400, {"error": {"message": NO_CHAT_TEMPLATE, "code": 400}})
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                limit = payload["max_tokens"]
                tokens = limit if payload.get("ignore_eos") else min(limit, server.natural_tokens)
                sizes = server.chunk_sizes(tokens)
                time.sleep(server.first_delay)
                if chat:
                    self._send({"choices": [{"index": 0, "delta": {"role": "assistant"}}]})
                for number, size in enumerate(sizes):
                    if number:
                        time.sleep(server.chunk_delay)
                    last = number == len(sizes) - 1
                    finish = ("length" if tokens == limit else "stop") if last else None
                    words = "w " * size
                    if "MIDERROR" in text and number == 1:
                        self._send({"error": {"message": "engine died", "code": 500}})
                        break
                    if chat:
                        key = "reasoning_content" if "THINK" in text and number == 0 else "content"
                        choice = {"index": 0, "delta": {key: words}, "finish_reason": finish}
                    else:
                        choice = {"index": 0, "text": words, "finish_reason": finish}
                    self._send({"id": "x", "choices": [choice], "usage": None})
                server.account(sizes)
                if "NOUSAGE" not in text:
                    usage = {"prompt_tokens": len(text.split()), "completion_tokens": tokens}
                    self._send({"id": "x", "choices": [], "usage": usage})
                self._send("[DONE]")
                self.wfile.write(b"0\r\n\r\n")

        return Handler


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


def smoke(**kwargs: Any) -> BenchSettings:
    return BenchSettings(workload=load_workload("smoke"), **kwargs)


def test_one_request_timing_and_usage(server: FakeOpenAIServer) -> None:
    report = run_benchmark_sync(Endpoint(server.url), smoke(warmup_requests=0))
    (level,) = report.levels
    (record,) = level.requests
    assert record.success and record.error is None
    assert record.output_tokens == 10  # from usage: 4 chunks carried 1 + 3 + 3 + 3 tokens
    assert record.chunks == 4
    assert record.finish_reason == "stop"
    assert record.prompt_tokens == len(REFERENCE_PROMPT.split())
    assert record.ttft_ms is not None and record.e2el_ms is not None and record.tpot_ms is not None
    # lower bounds only: the server sleeps 50 ms before its first chunk, 20 ms between chunks
    assert record.ttft_ms >= 45  # the role-only chunk does not count as the first token
    assert record.e2el_ms - record.ttft_ms >= 55
    assert len(record.itl_ms) == 3
    assert sum(record.itl_ms) == pytest.approx(record.e2el_ms - record.ttft_ms, abs=0.01)
    assert record.tpot_ms == pytest.approx((record.e2el_ms - record.ttft_ms) / 9)
    # several tokens per chunk: TPOT spreads 3 gaps over 9 tokens, a third of the mean ITL
    assert record.tpot_ms == pytest.approx(sum(record.itl_ms) / len(record.itl_ms) / 3, rel=0.01)
    assert level.mean_tokens_per_chunk == 2.5
    assert level.completed == 1 and level.failed == 0
    assert level.total_output_tokens == 10
    assert level.output_throughput == pytest.approx(10 / level.duration)


def test_payload_is_openai_streaming_with_usage_and_capped() -> None:
    with FakeOpenAIServer(chunk_delay=0.0) as srv:
        run_benchmark_sync(Endpoint(srv.url), smoke(warmup_requests=0, ignore_eos=True))
    (payload,) = srv.payloads
    assert payload["stream"] is True
    assert payload["stream_options"] == {"include_usage": True}
    assert payload["model"] == "tiny"
    assert payload["temperature"] == 0.0
    assert payload["ignore_eos"] is True
    assert payload["messages"] == [{"role": "user", "content": REFERENCE_PROMPT}]
    # 2000 requested, but the server's max_model_len is 512
    assert payload["max_tokens"] == 512 - len(REFERENCE_PROMPT.encode()) - PROMPT_TOKEN_RESERVE


def test_ignore_eos_generates_max_tokens() -> None:
    with FakeOpenAIServer(chunk_delay=0.0, first_delay=0.0, max_model_len=None) as srv:
        report = run_benchmark_sync(
            Endpoint(srv.url), smoke(warmup_requests=0, ignore_eos=True, max_tokens=50)
        )
    (record,) = report.levels[0].requests
    assert (record.output_tokens, record.finish_reason, record.max_tokens) == (50, "length", 50)
    assert srv.payloads[0]["max_tokens"] == 50  # no max_model_len: nothing to cap


def test_spec_decode_delta_excludes_warmup(server: FakeOpenAIServer) -> None:
    report = run_benchmark_sync(
        Endpoint(server.url), smoke(warmup_requests=2, requests=3, concurrency=(1,))
    )
    assert len(server.payloads) == 5  # 2 warm-up + 3 measured
    (level,) = report.levels
    assert len(level.requests) == 3
    # 3 requests x 3 verify steps, each accepting 2 of 4 drafted tokens
    assert level.spec_decode_num_drafts == 9
    assert level.spec_decode_draft_tokens == 36
    assert level.spec_decode_accepted_tokens == 18
    assert level.spec_decode_acceptance_length == pytest.approx(3.0)
    assert level.spec_decode_acceptance_rate == pytest.approx(50.0)
    assert level.spec_decode_per_position_acceptance_rates == pytest.approx([1.0, 1.0, 0.0, 0.0])
    assert level.server_generation_tokens == 30
    assert report.config.engine_version == "0.32.0"
    assert report.config.served_model_name == "tiny"
    assert report.config.max_model_len == 512
    assert report.config.url == server.url


@pytest.mark.parametrize("concurrency", [1, 3])
def test_concurrency_is_held(concurrency: int) -> None:
    with FakeOpenAIServer(first_delay=0.1, chunk_delay=0.0) as srv:
        report = run_benchmark_sync(
            Endpoint(srv.url),
            smoke(warmup_requests=0, requests=6, concurrency=(concurrency,)),
        )
    assert srv.max_in_flight == concurrency
    level = report.levels[0]
    assert level.max_concurrency == concurrency and level.completed == 6
    starts = sorted(r.start_s for r in level.requests)
    # request c+1 waits for a free slot: the first reply takes at least 100 ms
    assert starts[concurrency] - starts[0] >= 0.09


def test_levels_run_in_order_with_deterministic_prompts(server: FakeOpenAIServer) -> None:
    workload = load_workload("mixed")
    report = run_benchmark_sync(
        Endpoint(server.url),
        BenchSettings(workload=workload, concurrency=(1, 2), warmup_requests=1, requests=4),
    )
    assert [lv.max_concurrency for lv in report.levels] == [1, 2]
    measured = [p for i, p in enumerate(server.payloads) if i not in (0, 5)]  # drop warm-ups
    first_level = [p["messages"][-1]["content"] for p in measured[:4]]
    assert first_level == [p.chat_messages()[-1]["content"] for p in workload.prompts[:4]]
    assert [r.prompt_id for r in report.levels[0].requests] == [
        "relativity",
        "code",
        "arithmetic",
        "summary",
    ]
    assert report.workload.num_prompts == 8 and report.workload.requests_per_level == 4


def test_completions_api_and_failures(server: FakeOpenAIServer, tmp_path: Path) -> None:
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"id": "ok", "prompt": "hello there", "max_tokens": 7},
                {"id": "bad", "prompt": "please FAIL"},
                {"id": "nousage", "prompt": "NOUSAGE here"},
                {"id": "mid", "prompt": "MIDERROR now"},
            ]
        )
        + "\n"
    )
    settings = BenchSettings(workload=load_workload(str(jsonl)), warmup_requests=1)
    report = run_benchmark_sync(Endpoint(server.url + "/v1", api="completions"), settings)
    level = report.levels[0]
    by_id = {r.prompt_id: r for r in level.requests}
    assert by_id["ok"].success and by_id["ok"].output_tokens == 7
    assert by_id["ok"].max_tokens == 7  # the prompt's own max_tokens wins
    assert by_id["bad"].error == "HTTP 400: bad request: FAIL"
    assert by_id["nousage"].error is not None and "without usage" in by_id["nousage"].error
    assert by_id["nousage"].output_tokens is None
    assert by_id["mid"].error == "engine died"
    assert (level.completed, level.failed) == (1, 3)
    assert len(level.errors) == 3
    assert level.total_output_tokens == 7
    assert report.workload.api == "completions" and report.workload.source == str(jsonl)
    assert all("prompt" in p and "messages" not in p for p in server.payloads)


def test_reasoning_chunks_count_as_tokens(server: FakeOpenAIServer) -> None:
    async def one() -> list[RequestRecord]:
        endpoint = Endpoint(server.url)
        prompt = load_workload("smoke").prompts[0].model_copy(update={"prompt": "THINK first"})
        async with make_client(endpoint, 1) as client:
            records, _ = await run_requests(
                client, endpoint, "tiny", [prompt], RequestOptions(max_tokens=10), concurrency=1
            )
        return records

    (record,) = asyncio.run(one())
    assert record.chunks == 4 and record.success


def test_no_metrics_endpoint_leaves_spec_fields_empty() -> None:
    with FakeOpenAIServer(metrics=False, first_delay=0.0, chunk_delay=0.0) as srv:
        report = run_benchmark_sync(Endpoint(srv.url), smoke(warmup_requests=0))
    level = report.levels[0]
    assert level.completed == 1
    assert level.spec_decode_acceptance_length is None
    assert level.spec_decode_num_drafts is None
    assert report.config.engine_version is None


def test_server_errors_are_one_line_benchmark_errors(server: FakeOpenAIServer) -> None:
    with pytest.raises(BenchmarkError, match="no served model 'other'") as caught:
        run_benchmark_sync(Endpoint(server.url, model="other"), smoke())
    assert caught.value.hint == "served: tiny"
    failing = load_workload("smoke").model_copy(
        update={
            "prompts": (load_workload("smoke").prompts[0].model_copy(update={"prompt": "FAIL"}),)
        }
    )
    with pytest.raises(BenchmarkError, match="warm-up request failed: HTTP 400"):
        run_benchmark_sync(Endpoint(server.url), BenchSettings(workload=failing))


def test_a_model_without_a_chat_template_is_pointed_to_completions() -> None:
    with FakeOpenAIServer(first_delay=0.0, chunk_delay=0.0, chat_template=False) as bare:
        with pytest.raises(WarmupRefused, match="default chat template is no longer allowed") as e:
            run_benchmark_sync(Endpoint(bare.url), smoke())
        assert e.value.hint is not None and "--api completions" in e.value.hint
        assert "bench: {api: completions}" in e.value.hint
        report = run_benchmark_sync(Endpoint(bare.url, api="completions"), smoke())
    level = report.levels[0]
    assert level.completed == len(level.requests) > 0 and level.failed == 0
    assert report.workload.api == "completions"


@pytest.mark.parametrize(
    ("error", "refused"),
    [
        ("HTTP 400: As of transformers v4.44, default chat template is no longer allowed", True),
        ("HTTP 404: The model `other` does not exist.", True),
        ("HTTP 429: too many requests", False),
        ("HTTP 408: request timeout", False),
        ("HTTP 500: internal server error", False),
        ("connection refused", False),
        (None, False),
    ],
)
def test_only_a_client_error_the_server_repeats_is_a_refusal(
    error: str | None, refused: bool
) -> None:
    assert refused_by_server(error) is refused


def test_unreachable_server() -> None:
    with FakeOpenAIServer() as srv:
        url = srv.url
    with pytest.raises(BenchmarkError, match="cannot reach the server"):
        run_benchmark_sync(Endpoint(url), smoke())


def test_model_listing_and_cap() -> None:
    async def info() -> tuple[str, int | None]:
        with FakeOpenAIServer(max_model_len=None) as srv:
            endpoint = Endpoint(srv.url)
            async with make_client(endpoint, 1) as client:
                got = await fetch_server_info(client, endpoint)
        return got.model, got.max_model_len

    assert asyncio.run(info()) == ("tiny", None)
    assert cap_max_tokens(2000, None, "x" * 10) == 2000
    assert cap_max_tokens(100, 4096, "x" * 10) == 100
    with pytest.raises(BenchmarkError, match="leaves no room"):
        cap_max_tokens(100, 70, "x" * 10)
