"""An async streaming client for OpenAI-compatible servers (vLLM, SGLang): one request, one record.

Every request streams with ``stream_options.include_usage``: output (and prompt) token counts come
from the server's final ``usage`` chunk, never from counting chunks — under speculative decoding
one chunk carries several tokens. A stream without usage is a failed request, not a guess.

Timing (``time.perf_counter``, from just before the request is sent):

- TTFT: the first chunk whose choice carries generated text (``content``, ``reasoning_content``,
  ``reasoning`` or ``text``). vLLM's chat stream opens with a role-only chunk sent with the first
  token; counting it, as ``vllm bench serve`` does, would add a near-zero ITL sample.
- ITL: the gaps between consecutive text-carrying chunks.
- E2EL: the last chunk that has choices (the trailing usage-only chunk is not generation).

Transport: the streams go over ``aiohttp``, the client ``vllm bench serve`` uses (keep-alive
connections, its C HTTP parser, https, proxies from the environment). Each socket read is taken
as it arrives (``iter_any``, one timestamp per read) and split into SSE events here, on bytes:
aiohttp has no SSE reader, and a line or event iterator would wake a coroutine per line instead
of per read. ``/v1/models``, ``/version``, ``/metrics`` and ``/reset_prefix_cache`` go through
the run's httpx client (:mod:`dflashops.bench.server_api`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dflashops.bench.endpoint import (
    API_PATHS,
    CONNECT_TIMEOUT_S,
    Endpoint,
    error_body_text,
    one_line,
)
from dflashops.bench.models import RequestRecord
from dflashops.bench.stats import tpot_ms
from dflashops.bench.workload import PromptSpec
from dflashops.errors import BenchmarkError

if TYPE_CHECKING:
    import aiohttp
    import httpx

# Tokens a chat template adds around the user's text; a prompt's UTF-8 byte count bounds its own
# tokens from above for byte-level BPE vocabularies, so prompt + reserve never under-counts.
PROMPT_TOKEN_RESERVE = 64
_TEXT_FIELDS = ("content", "reasoning_content", "reasoning")
# after a stream's [DONE], how long to wait for the end of its HTTP body: aiohttp reuses a
# connection only once the body has been read to its end
DRAIN_S = 2.0


@dataclass(frozen=True)
class RequestOptions:
    """Sampling for every request (a prompt's own max_tokens/temperature win).

    ``thinking`` sets ``chat_template_kwargs.enable_thinking`` on chat requests (Qwen3-style
    templates); None sends nothing. vLLM drops template kwargs a template does not use.
    """

    max_tokens: int
    temperature: float = 0.0
    ignore_eos: bool = False
    max_model_len: int | None = None
    thinking: bool | None = None


def stream_session(endpoint: Endpoint, concurrency: int) -> aiohttp.ClientSession:
    """The aiohttp session the streams of one batch share: at most ``concurrency`` kept-alive
    connections; no total timeout (``stream_request`` bounds each request by
    ``endpoint.timeout_s``; aiohttp's default would cut streams at 5 minutes)."""
    import aiohttp

    return aiohttp.ClientSession(
        headers={"Content-Type": "application/json", **endpoint.headers()},
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
        trust_env=True,  # HTTP(S)_PROXY and NO_PROXY, as the httpx client honours them
    )


def cap_max_tokens(requested: int, max_model_len: int | None, prompt_text: str) -> int:
    """``requested``, lowered so prompt + output fits ``max_model_len`` (a conservative budget)."""
    if max_model_len is None:
        return requested
    budget = max_model_len - len(prompt_text.encode("utf-8")) - PROMPT_TOKEN_RESERVE
    if budget < 1:
        raise BenchmarkError(
            f"a prompt of {len(prompt_text)} characters leaves no room for output within "
            f"max_model_len {max_model_len}",
            hint="use a shorter workload or a larger --max-model-len",
        )
    return min(requested, budget)


def max_tokens_caps(prompts: Sequence[PromptSpec], options: RequestOptions) -> list[str]:
    """One warning per prompt whose max_tokens ``max_model_len`` lowers (the reference request
    asks for 2000 tokens; a small lab model serves 512)."""
    warnings = []
    for prompt in {p.id: p for p in prompts}.values():
        wanted = prompt.max_tokens or options.max_tokens
        capped = cap_max_tokens(wanted, options.max_model_len, prompt.text())
        if capped < wanted:
            warnings.append(
                f"prompt {prompt.id!r}: max_tokens {wanted} capped to {capped} to fit the "
                f"server's max_model_len {options.max_model_len}"
            )
    return warnings


def build_payload(
    endpoint: Endpoint, model: str, prompt: PromptSpec, options: RequestOptions
) -> dict[str, Any]:
    """The JSON body for one streamed request."""
    payload: dict[str, Any] = {
        "model": model,
        "max_tokens": cap_max_tokens(
            prompt.max_tokens or options.max_tokens, options.max_model_len, prompt.text()
        ),
        "temperature": options.temperature if prompt.temperature is None else prompt.temperature,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if options.ignore_eos:
        payload["ignore_eos"] = True
    if endpoint.api == "chat":
        payload["messages"] = prompt.chat_messages()
        if options.thinking is not None:
            payload["chat_template_kwargs"] = {"enable_thinking": options.thinking}
    elif prompt.prompt is None:
        raise BenchmarkError(f"prompt {prompt.id!r} has chat messages; use --api chat")
    else:
        payload["prompt"] = prompt.prompt
    return payload


@dataclass
class _Stream:
    """What one response stream showed, in perf_counter seconds."""

    sent: float
    first_text: float | None = None
    first_choice: float | None = None
    last_choice: float | None = None
    last_text: float | None = None
    chunks: int = 0
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    # the connection was refused, reset or cut, or no answer came in time: is the server there?
    lost: bool = False
    gaps: list[float] = field(default_factory=list)
    done: bool = False
    _pending: bytes = b""

    def feed(self, data: bytes, now: float) -> bool:
        """Take the complete SSE events in ``data`` (the rest waits for the next read), all
        stamped ``now``; True once the stream is over (``[DONE]`` or an error)."""
        buffer = self._pending + data if self._pending else data
        if b"\r" in buffer:  # after the join: a CRLF may be split between two reads
            buffer = buffer.replace(b"\r\n", b"\n")
        pos = 0
        while not self.done:
            end = buffer.find(b"\n\n", pos)
            if end < 0:
                break
            self._event(buffer[pos:end], now)
            pos = end + 2
        self._pending = b"" if self.done else buffer[pos:]
        return self.done

    def _event(self, event: bytes, now: float) -> None:
        # "data:" lines; blank lines, ": ping" comments and "event:" names are not data
        if event.startswith(b"data:") and b"\ndata:" not in event:
            data = event[5:].strip()
        else:
            lines = [ln[5:].strip() for ln in event.split(b"\n") if ln.startswith(b"data:")]
            if not lines:
                return
            data = b"\n".join(lines)
        if data == b"[DONE]":
            self.done = True
            return
        try:
            chunk = json.loads(data)
        except ValueError:
            self.error = f"bad stream data: {data[:80]!r}"
            self.done = True
            return
        if isinstance(chunk, dict):
            self.take(chunk, now)
            self.done = self.error is not None

    def take(self, data: dict[str, Any], now: float) -> None:
        if "error" in data:
            error = data["error"]
            self.error = str(error.get("message", error) if isinstance(error, dict) else error)
            return
        usage = data.get("usage")
        if isinstance(usage, dict):
            self.prompt_tokens = _int_or_none(usage.get("prompt_tokens"))
            self.output_tokens = _int_or_none(usage.get("completion_tokens"))
        choices = data.get("choices") or []
        if not choices:
            return
        choice = choices[0]
        self.first_choice = self.first_choice or now
        self.last_choice = now
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        if _carries_text(choice):
            if self.last_text is None:
                self.first_text = now
            else:
                self.gaps.append(now - self.last_text)
            self.last_text = now
            self.chunks += 1


def _carries_text(choice: dict[str, Any]) -> bool:
    """Whether a choice carries generated text (runs once per chunk: kept cheap)."""
    text = choice.get("text")
    if isinstance(text, str):
        return bool(text)
    delta = choice.get("delta")
    return isinstance(delta, dict) and any(delta.get(key) for key in _TEXT_FIELDS)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


async def stream_request(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    payload: dict[str, Any],
    *,
    prompt_id: str,
    level_start: float,
) -> RequestRecord:
    """Send one streamed request and measure it; failures become a record with ``error``."""
    record, _ = await _measure(
        session, endpoint, payload, prompt_id=prompt_id, level_start=level_start
    )
    return record


async def _measure(
    session: aiohttp.ClientSession,
    endpoint: Endpoint,
    payload: dict[str, Any],
    *,
    prompt_id: str,
    level_start: float,
) -> tuple[RequestRecord, bool]:
    """``stream_request``'s record, and whether the request lost its connection (or timed out)."""
    import aiohttp

    body = json.dumps(payload, separators=(",", ":")).encode()
    stream = _Stream(sent=time.perf_counter())
    try:
        async with asyncio.timeout(endpoint.timeout_s):
            await _post_stream(session, endpoint.url(API_PATHS[endpoint.api]), body, stream)
    except aiohttp.ClientError as exc:  # first: aiohttp's own timeouts are TimeoutErrors too
        stream.error = one_line(exc)
        # a body cut short is a connection lost mid-stream (a killed server's last streams)
        stream.lost = isinstance(exc, aiohttp.ClientConnectionError | aiohttp.ClientPayloadError)
    except TimeoutError:
        if not stream.done:  # a finished stream was only waiting for the end of its body
            stream.error = f"timed out after {endpoint.timeout_s:g} s"
            stream.lost = True  # a slow server still answers the check; a cut link does not
    return _record(stream, prompt_id, payload, level_start), stream.lost


async def _post_stream(
    session: aiohttp.ClientSession, url: str, body: bytes, stream: _Stream
) -> None:
    import aiohttp

    try:
        response = await session.post(url, data=body)
    except aiohttp.ClientConnectorError:
        raise
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
        # no reply at all: a kept-alive connection the server closed as it was reused. aiohttp
        # retries that only for idempotent methods; send the POST once more, timed afresh
        stream.sent = time.perf_counter()
        response = await session.post(url, data=body)
    async with response:
        if response.status != 200:
            stream.error = f"HTTP {response.status}: {error_body_text(await response.read())}"
            return
        async for data in response.content.iter_any():
            if stream.feed(data, time.perf_counter()):
                break
        if not response.content.at_eof():
            # the body's last chunk normally follows [DONE] at once; read it so the connection
            # is reused, but never wait long on a server that keeps the body open
            with contextlib.suppress(TimeoutError, aiohttp.ClientError):
                async with asyncio.timeout(DRAIN_S):
                    await response.content.read()


def _record(
    stream: _Stream, prompt_id: str, payload: dict[str, Any], level_start: float
) -> RequestRecord:
    error = stream.error
    if error is None and stream.last_choice is None:
        error = "the stream carried no choices"
    if error is None and stream.output_tokens is None:
        error = "the stream ended without usage (stream_options.include_usage unsupported?)"
    first = stream.first_text or stream.first_choice
    ttft = None if first is None else 1000.0 * (first - stream.sent)
    e2el = None if stream.last_choice is None else 1000.0 * (stream.last_choice - stream.sent)
    return RequestRecord(
        prompt_id=prompt_id,
        success=error is None,
        error=error,
        start_s=round(stream.sent - level_start, 6),
        max_tokens=payload.get("max_tokens"),
        ttft_ms=ttft,
        e2el_ms=e2el,
        tpot_ms=tpot_ms(ttft, e2el, stream.output_tokens) if error is None else None,
        itl_ms=[round(1000.0 * gap, 4) for gap in stream.gaps],
        prompt_tokens=stream.prompt_tokens,
        output_tokens=stream.output_tokens,
        chunks=stream.chunks,
        finish_reason=stream.finish_reason,
    )


async def run_requests(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    model: str,
    prompts: Sequence[PromptSpec],
    options: RequestOptions,
    *,
    concurrency: int,
    on_done: Callable[[RequestRecord], None] | None = None,
    lost_connection: Callable[[], Awaitable[bool]] | None = None,
) -> tuple[list[RequestRecord], float]:
    """Send ``prompts`` with at most ``concurrency`` in flight; records in prompt order, and the
    wall time from the first send to the last reply in seconds.

    ``lost_connection`` is awaited after a request whose connection was refused, reset or cut, or
    that timed out;
    when it says True (the server stopped answering) no further request is sent, so the records
    are fewer than the prompts. The streams share one aiohttp session (``stream_session``);
    ``client``, the run's httpx client for its other calls, carries none of them.
    """
    if concurrency < 1:
        raise BenchmarkError(f"concurrency must be at least 1, got {concurrency}")
    payloads = [build_payload(endpoint, model, p, options) for p in prompts]
    records: list[RequestRecord | None] = [None] * len(prompts)
    pending = iter(range(len(prompts)))
    workers = min(concurrency, len(prompts))

    stopped = False

    async with stream_session(endpoint, max(workers, 1)) as session:
        start = time.perf_counter()

        async def worker() -> None:
            nonlocal stopped
            # each worker takes the next index: `concurrency` requests in flight until drained
            while not stopped and (index := next(pending, None)) is not None:
                record, lost = await _measure(
                    session,
                    endpoint,
                    payloads[index],
                    prompt_id=prompts[index].id,
                    level_start=start,
                )
                records[index] = record
                if on_done is not None:
                    on_done(record)
                if lost and lost_connection is not None and await lost_connection():
                    stopped = True

        await asyncio.gather(*(worker() for _ in range(workers)))
        duration = time.perf_counter() - start
    return [r for r in records if r is not None], duration
