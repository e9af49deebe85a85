"""``dflashops bench`` against the independent client on any running server, level by level.

The GPU runs pair them inside ``gpu_run.py``; this runs the same pairing against a server
anywhere (a lab container's SGLang, say): per level and repeat, ``dflashops bench --url`` and
``gpu_client.level`` (standard library only, sharing nothing with bench but the prompts) with the
same prompts, concurrency, request count, ``max_tokens`` (``ignore_eos``, temperature 0), the
order alternating between repeats. Prompts come from a JSONL file (their own ``max_tokens`` is
dropped so both tools ask for the same length; chat ``messages`` rows are left out: the client
sends completions); requests cycle over them::

    .venv/bin/python benchmarks/bench_vs_client.py --url http://10.200.0.10:30000 --model tiny \\
        -w ~/.cache/dflashops/lab/models/prompts.jsonl --levels 4:192,16:384 --max-tokens 128

Prints one JSON object: per level and repeat both tools' output tok/s, mean TPOT, TTFT and the
difference (bench / client - 1).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_client


@dataclass(frozen=True)
class Shape:
    concurrency: int
    requests: int
    max_tokens: int


def bench_level(url: str, model: str, workload: Path, shape: Shape) -> dict[str, Any]:
    argv = [sys.executable, "-m", "dflashops", "bench", "--url", url, "--model", model]
    argv += ["--api", "completions", "-w", str(workload), "-c", str(shape.concurrency)]
    argv += ["-n", str(shape.requests), "--warmup", "1", "--max-tokens", str(shape.max_tokens)]
    # the result file goes with the prompts (bench saves one per run otherwise, in the cwd)
    argv += [
        "--ignore-eos",
        "--temperature",
        "0",
        "--json",
        "--out",
        str(workload.parent / "b.json"),
    ]
    run = subprocess.run(argv, capture_output=True, text=True, check=True)
    ((level,),) = [r["levels"] for r in json.loads(run.stdout)["reports"]]
    return {
        "output_tok_s": level["output_throughput"],
        "mean_tpot_ms": level["mean_tpot_ms"],
        "mean_ttft_ms": level["mean_ttft_ms"],
        "duration_s": level["duration"],
        "completed": level["completed"],
    }


def client_level(port: int, model: str, prompts: list[str], shape: Shape) -> dict[str, Any]:
    res = gpu_client.level(
        port,
        model,
        prompts,
        concurrency=shape.concurrency,
        requests=shape.requests,
        max_tokens=shape.max_tokens,
    )
    return {
        "output_tok_s": res["output_tok_s"],
        "mean_tpot_ms": res["mean_tpot_ms"],
        "median_ttft_ms": res["median_ttft_ms"],
        "duration_s": res["wall_s"],
        "completed": res["requests"],
        "errors": res["errors"][:3],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True, help="the served model name")
    parser.add_argument("-w", "--workload", type=Path, required=True, help="JSONL of {prompt}")
    parser.add_argument("--levels", default="4:192", help="CONCURRENCY:REQUESTS,…")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    where = urlsplit(args.url)
    gpu_client.HOST = where.hostname or "127.0.0.1"
    port = where.port or 80
    rows = [json.loads(line) for line in args.workload.read_text().splitlines() if line.strip()]
    prompts = [row["prompt"] for row in rows if isinstance(row.get("prompt"), str)]
    levels = [tuple(int(x) for x in item.split(":")) for item in args.levels.split(",")]
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        workload = Path(tmp) / "prompts.jsonl"
        workload.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
        for concurrency, requests in levels:
            for repeat in range(args.repeats):
                shape = Shape(concurrency, requests, args.max_tokens)
                order = ["bench", "client"] if repeat % 2 == 0 else ["client", "bench"]
                got: dict[str, Any] = {}
                for tool in order:
                    got[tool] = (
                        bench_level(args.url, args.model, workload, shape)
                        if tool == "bench"
                        else client_level(port, args.model, prompts, shape)
                    )
                ratio = got["bench"]["output_tok_s"] / got["client"]["output_tok_s"] - 1
                row = {"concurrency": concurrency, "requests": requests, "first": order[0]}
                out.append({**row, **got, "difference": round(ratio, 4)})
                print(json.dumps(out[-1]), file=sys.stderr, flush=True)
    print(json.dumps({"url": args.url, "max_tokens": args.max_tokens, "levels": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
