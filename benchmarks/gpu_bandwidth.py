"""What the H200 itself reaches reading weights, so the roofline share of vLLM's plain decode
(issue 22) can be judged against the machine rather than the datasheet alone. Torch only (no
vLLM): runs on the GPU host before the payload is unpacked.

`python3 benchmarks/gpu_bandwidth.py --out DIR` measures, each as the median of repeated CUDA-event
timings:

1. ``copy``: a 4 GiB device-to-device copy (reads and writes: 8 GiB moved);
2. ``read``: a 4 GiB bf16 tensor summed into fp32 (reads only);
3. ``gemv-chain``: one batch-1 bf16 decode step's weight reads with the Qwen3-8B shape the run
   served (36 layers of fused QKV, O, fused gate/up and down projections, then the LM head;
   16.4 GB of distinct weights, the same bytes the roofline counts), replayed as one CUDA graph
   so launch gaps do not count. No attention, norms or sampling: the floor of the step that
   vLLM's 5.20 ms is compared with.

Writes ``bandwidth.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

# Qwen3-8B (gpu_models.py's target): hidden 4096, 32 heads x 128, 8 KV heads, MLP 12288
HIDDEN, HEADS, KV, HEAD_DIM, INTER, LAYERS, VOCAB = 4096, 32, 8, 128, 12288, 36, 151936


def timed(fn: Any, repeats: int = 30, warmup: int = 5) -> list[float]:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) / 1000.0)
    return out


def copy_and_read() -> dict[str, Any]:
    n = 4 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    copy_s = statistics.median(timed(lambda: dst.copy_(src)))
    half = src.view(torch.bfloat16)
    read_s = statistics.median(timed(lambda: half.sum(dtype=torch.float32)))
    return {
        "copy_tb_s": round(2 * n / copy_s / 1e12, 3),
        "read_tb_s": round(n / read_s / 1e12, 3),
        "bytes": n,
    }


def gemv_chain() -> dict[str, Any]:
    shapes = [
        ((HEADS + 2 * KV) * HEAD_DIM, HIDDEN),  # fused q/k/v
        (HIDDEN, HEADS * HEAD_DIM),  # o
        (2 * INTER, HIDDEN),  # fused gate/up
        (HIDDEN, INTER),  # down
    ]
    weights = [
        torch.randn(shape, dtype=torch.bfloat16, device="cuda") * 0.01
        for _ in range(LAYERS)
        for shape in shapes
    ]
    head = torch.randn((VOCAB, HIDDEN), dtype=torch.bfloat16, device="cuda") * 0.01
    nbytes = sum(w.numel() * 2 for w in weights) + head.numel() * 2
    x = torch.randn((1, HIDDEN), dtype=torch.bfloat16, device="cuda")

    def step() -> torch.Tensor:
        h = x
        for i in range(LAYERS):
            qkv, o, gate_up, down = weights[4 * i : 4 * i + 4]
            a = torch.matmul(h, qkv.t())
            h = torch.matmul(a[:, : HEADS * HEAD_DIM], o.t())
            g = torch.matmul(h, gate_up.t())
            m = torch.nn.functional.silu(g[:, :INTER]) * g[:, INTER:]
            h = torch.matmul(m, down.t())
        return torch.matmul(h, head.t())

    eager_s = statistics.median(timed(step, repeats=20))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()  # warm the kernels' workspaces on the capture stream
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph_s = statistics.median(timed(graph.replay, repeats=50))
    return {
        "weight_bytes": nbytes,
        "eager_ms": round(eager_s * 1000, 3),
        "graph_ms": round(graph_s * 1000, 3),
        "graph_tb_s": round(nbytes / graph_s / 1e12, 3),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    started = time.monotonic()
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,clocks.max.mem", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    result: dict[str, Any] = {"gpu": smi, "torch": torch.__version__}
    result["copy_read"] = copy_and_read()
    result["gemv_chain"] = gemv_chain()
    result["seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bandwidth.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
