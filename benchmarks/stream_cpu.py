"""Client CPU per streamed token: our stream loop (aiohttp plus our SSE splitting) against
``vllm bench serve``'s own request function (aiohttp), on the same local SSE server.

Run on demand: ``.venv/bin/python benchmarks/stream_cpu.py [--tokens 500] [--pace-ms 2]``.

No vLLM server is started: a standard-library server in a subprocess streams vLLM's exact chat
chunk format (one token per chunk, then a usage chunk and ``[DONE]``), flushing and sleeping
``--pace-ms`` after every chunk, as a real server does between decode steps (``--pace-ms 0``
coalesces eight chunks per write: the parser's cost alone). Each client runs in its own process
and reports ``time.process_time()`` over the measured requests only (warm-up excluded), both
sending on one aiohttp session per run. vLLM's ``async_request_openai_chat_completions`` runs in
the lab's vLLM venv.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import socket
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflashops.lab.runtime import VllmRuntime  # noqa: E402

SERVER = textwrap.dedent(
    r"""
    import asyncio, json, sys
    PACE = float(sys.argv[2])
    CHUNK = (b'data: {"id":"chatcmpl-b1f0c0f4d4a34d8c9c3a2f1e0d9c8b7a","object":'
             b'"chat.completion.chunk","created":1764687000,"model":"tiny","choices":[{"index":0,'
             b'"delta":{"content":" word"},"logprobs":null,"finish_reason":null,"token_ids":null}]'
             b',"prompt_token_ids":null}\n\n')
    ROLE = (b'data: {"id":"x","object":"chat.completion.chunk","created":1,"model":"tiny",'
            b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]}\n\n')

    async def handle(reader, writer):
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            body = json.loads(await reader.readexactly(length)) if length else {}
            n = body.get("max_tokens") or body.get("max_completion_tokens") or 1
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")
            send = lambda b: writer.write(b"%x\r\n%s\r\n" % (len(b), b))
            send(ROLE)
            for i in range(n):
                send(CHUNK)
                if PACE:
                    await writer.drain()
                    await asyncio.sleep(PACE)
                elif i % 8 == 7:
                    await writer.drain()
            usage = {"prompt_tokens": 5, "total_tokens": n + 5, "completion_tokens": n}
            send(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            send(b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]))
        async with server:
            await server.serve_forever()

    asyncio.run(main())
    """
)

VLLM_CLIENT = textwrap.dedent(
    """
    import asyncio, sys, time, aiohttp
    from vllm.benchmarks.lib.endpoint_request_func import (
        RequestFuncInput, async_request_openai_chat_completions)
    url, conc, n, tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

    async def main():
        sem = asyncio.Semaphore(conc)
        connector = aiohttp.TCPConnector(limit=conc, keepalive_timeout=60)
        timeout = aiohttp.ClientTimeout(total=3600)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            def one_input(t):
                return RequestFuncInput(prompt="hello", api_url=url + "/v1/chat/completions",
                                        prompt_len=5, output_len=t, model="tiny",
                                        extra_body={"ignore_eos": True})
            await async_request_openai_chat_completions(one_input(8), session=session)

            async def one():
                async with sem:
                    return await async_request_openai_chat_completions(
                        one_input(tokens), session=session)

            cpu = time.process_time()
            outs = await asyncio.gather(*(one() for _ in range(n)))
            cpu = time.process_time() - cpu
        ok = [o for o in outs if o.success]
        print(sum(o.output_tokens for o in ok), cpu, len(outs) - len(ok))

    asyncio.run(main())
    """
)


async def ours(url: str, concurrency: int, n: int, tokens: int) -> tuple[int, float]:
    from dflashops.bench.client import RequestOptions, build_payload, stream_request, stream_session
    from dflashops.bench.endpoint import Endpoint
    from dflashops.bench.workload import PromptSpec

    endpoint = Endpoint(url, model="tiny")
    prompt = PromptSpec(id="p", prompt="hello")
    async with stream_session(endpoint, concurrency) as session:

        async def run(count: int, max_tokens: int) -> list[int]:
            payload = build_payload(endpoint, "tiny", prompt, RequestOptions(max_tokens=max_tokens))
            queue = iter(range(count))
            got: list[int] = []

            async def worker() -> None:
                for _ in queue:
                    record = await stream_request(
                        session, endpoint, payload, prompt_id="p", level_start=0.0
                    )
                    assert record.success, record.error
                    got.append(record.output_tokens or 0)

            await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
            return got

        await run(1, 8)
        cpu = time.process_time()
        got = await run(n, tokens)
        return sum(got), time.process_time() - cpu


def write_block(path: Path, text: str) -> None:
    """Replace what is between the stream-cpu markers of ``path`` (which must have them)."""
    begin, end = "<!-- stream-cpu:begin -->", "<!-- stream-cpu:end -->"
    old = path.read_text()
    if begin not in old or end not in old:
        raise SystemExit(f"{path} has no {begin} … {end} markers")
    head, rest = old.split(begin, 1)
    path.write_text(f"{head}{begin}\n{text}\n{end}{rest.split(end, 1)[1]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def median_us_per_token(
    argv: list[str], repeats: int, env: dict[str, str] | None
) -> tuple[float, int]:
    """Run one client ``repeats`` times: its median CPU µs per token, and failed requests."""
    values: list[float] = []
    failed = 0
    for _ in range(repeats):
        out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
        fields = out.stdout.split()
        tokens, cpu = int(fields[0]), float(fields[1])
        failed += int(fields[2]) if len(fields) > 2 else 0
        values.append(1e6 * cpu / tokens)
    return sorted(values)[len(values) // 2], failed


def shown(value: float, failed: int) -> str:
    return f"{value:.1f} ({failed} requests failed)" if failed else f"{value:.1f}"


def measure(args: argparse.Namespace, url: str, runtime: VllmRuntime | None) -> list[str]:
    command = shlex.join(["python", "benchmarks/stream_cpu.py", *sys.argv[1:]])
    lines = [
        f"{datetime.now(UTC):%Y-%m-%d %H:%M UTC}, `{command}`: pace {args.pace_ms:g} ms per "
        f"chunk, {args.tokens} tokens per request, median of {args.repeats} runs, client CPU "
        "µs per token",
        "",
        "| concurrency x requests | dflashops bench (aiohttp) | vllm bench serve (aiohttp) "
        "| ours / vLLM's |",
        "|---|---|---|---|",
    ]
    print("\n".join(lines))
    for c, n in ((1, 4), (4, 8)):
        sizes = [str(c), str(n), str(args.tokens)]
        child = [sys.executable, __file__, "--child", "--url", url, "--child-args", *sizes]
        ours_us, ours_failed = median_us_per_token(child, args.repeats, None)
        row = [shown(ours_us, ours_failed)]
        if runtime is None:
            row += ["(no lab vLLM runtime)", "-"]
        else:
            argv = [str(runtime.python), "-c", VLLM_CLIENT, url, *sizes]
            vllm_us, vllm_failed = median_us_per_token(argv, args.repeats, runtime.env())
            row += [shown(vllm_us, vllm_failed), f"{ours_us / vllm_us:.2f}"]
        lines.append(f"| {c} x {n} | " + " | ".join(row) + " |")
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--tokens", type=int, default=1000, help="per request")
    parser.add_argument("--pace-ms", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--results", type=Path, help="also write the table into this file's stream-cpu markers"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--child-args", nargs=3, type=int, help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        c, n, t = args.child_args
        print(*asyncio.run(ours(args.url, c, n, t)))
        return

    from dflashops.lab.runtime import find_runtime

    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(port), str(args.pace_ms / 1000.0)],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        lines = measure(args, f"http://127.0.0.1:{port}", find_runtime())
        if args.results:
            write_block(args.results, "\n".join(lines))
    finally:
        server.terminate()
        server.wait(timeout=10)


if __name__ == "__main__":
    main()
