"""An independent OpenAI-completions client for the GPU run (standard library only).

It shares nothing with ``dflashops.bench`` but the request file: the same JSONL prompts, streamed
(``/v1/completions``, temperature 0, ``ignore_eos``), so its output tok/s at a concurrency is a
check on bench's. Output tok/s = completion tokens (the server's usage) / the level's wall time,
the definition ``vllm bench serve`` and ``dflashops bench`` use. It also reads the spec-decode
counters from ``/metrics`` before and after a level.
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
from typing import Any

# the server's address: the GPU run's servers listen on loopback; a lab container is elsewhere
HOST = "127.0.0.1"


def request(
    port: int, method: str, path: str, body: Any = None, timeout: float = 30
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        payload = json.dumps(body) if body is not None else None
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


SPEC_PREFIXES = ("vllm:spec_decode", "vllm:generation_tokens", "vllm:num_preemptions")


def metrics(port: int) -> dict[str, float]:
    """vLLM's spec-decode and generation counters, summed over labels (position kept)."""
    try:
        _, data = request(port, "GET", "/metrics", timeout=10)
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in data.decode(errors="replace").splitlines():
        if not line.startswith(SPEC_PREFIXES):
            continue
        name, _, value = line.rpartition(" ")
        if name.split("{")[0].endswith("_created"):
            continue
        key = name.split("{")[0]
        if 'position="' in name:
            key += "[" + name.split('position="')[1].split('"')[0] + "]"
        try:
            out[key] = out.get(key, 0.0) + float(value)
        except ValueError:
            continue
    return out


def counters_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    drafts = delta.get("vllm:spec_decode_num_drafts_total", 0.0)
    accepted = delta.get("vllm:spec_decode_num_accepted_tokens_total", 0.0)
    positions = sorted(
        (int(k.split("[")[1].rstrip("]")), v)
        for k, v in delta.items()
        if k.startswith("vllm:spec_decode_num_accepted_tokens_per_pos")
    )
    return {
        "drafts": drafts,
        "draft_tokens": delta.get("vllm:spec_decode_num_draft_tokens_total", 0.0),
        "accepted_tokens": accepted,
        "generation_tokens": delta.get("vllm:generation_tokens_total", 0.0),
        "acceptance_length": (1 + accepted / drafts) if drafts else None,
        "per_position": [round(v / drafts, 5) for _, v in positions] if drafts else [],
    }


def stream(port: int, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    conn = http.client.HTTPConnection(HOST, port, timeout=300)
    sent = time.perf_counter()
    headers = {"Content-Type": "application/json"}
    conn.request("POST", "/v1/completions", body=json.dumps(body), headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]!r}")
    times: list[float] = []
    usage: dict[str, Any] = {}
    while True:
        line = resp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        event = json.loads(data)
        if event.get("usage"):
            usage = event["usage"]
        if event.get("choices"):
            times.append(time.perf_counter())
    conn.close()
    tokens = int(usage.get("completion_tokens", len(times)))
    first, last = (times[0], times[-1]) if times else (sent, sent)
    return {
        "tokens": tokens,
        "chunks": len(times),
        "ttft_s": first - sent,
        "e2e_s": last - sent,
        "tpot_s": (last - first) / (tokens - 1) if tokens > 1 and times else None,
    }


def level(
    port: int, model: str, prompts: list[str], *, concurrency: int, requests: int, max_tokens: int
) -> dict[str, Any]:
    """One warm-up request, then ``requests`` requests ``concurrency`` at a time."""
    stream(port, model, prompts[0], min(32, max_tokens))
    jobs: queue.Queue[str] = queue.Queue()
    for i in range(requests):
        jobs.put(prompts[i % len(prompts)])
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            try:
                prompt = jobs.get_nowait()
            except queue.Empty:
                return
            try:
                res = stream(port, model, prompt, max_tokens)
            except (OSError, RuntimeError) as exc:
                with lock:
                    errors.append(str(exc)[:200])
                continue
            with lock:
                results.append(res)

    before = metrics(port)
    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    after = metrics(port)
    tokens = sum(r["tokens"] for r in results)
    tpots = sorted(r["tpot_s"] for r in results if r["tpot_s"])
    return {
        "concurrency": concurrency,
        "requests": len(results),
        "errors": errors,
        "wall_s": wall,
        "output_tokens": tokens,
        "output_tok_s": tokens / wall if wall > 0 else None,
        "median_tpot_ms": 1000 * tpots[len(tpots) // 2] if tpots else None,
        "mean_tpot_ms": 1000 * sum(tpots) / len(tpots) if tpots else None,
        "median_ttft_ms": 1000 * sorted(r["ttft_s"] for r in results)[len(results) // 2]
        if results
        else None,
        "counters": counters_delta(before, after),
        "decode_s": sum(r["tpot_s"] * (r["tokens"] - 1) for r in results if r["tpot_s"]),
    }
