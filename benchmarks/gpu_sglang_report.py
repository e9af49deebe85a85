"""Tables of the issue-37 SGLang run on the H200, off the GPU (reads what gpu_run.py brought back).

`python benchmarks/gpu_sglang_report.py RESULTS_DIR [RESULTS_DIR ...]` merges each folder's
``results.json`` (one per device call) and prints the Markdown for RESULTS.md:

- per run: seconds to ``/health``, concurrency-1 TPOT and decode rate from the independent
  client (``gpu_client``), next to vLLM 0.26.0's step on the same shape (RESULTS.md, issue 22).
  With dummy weights nothing is accepted, so a speculative run's c=1 TPOT *is* its step time;
- per bench run: ``dflashops bench`` against the independent client at each level, and the
  acceptance ``dflashops bench`` read from SGLang's ``/metrics``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# vLLM 0.26.0 on the same H200 and shape, c=1 step ms (RESULTS.md, "The product on a real H200")
VLLM_STEP_MS = {0: 5.202, 1: 6.348, 2: 6.337, 4: 6.344, 8: 6.330}


def merged(folders: list[Path]) -> dict[str, Any]:
    runs: dict[str, Any] = {}
    for folder in folders:
        for name, value in json.loads((folder / "results.json").read_text()).items():
            if isinstance(value, dict) and "run" in value:
                runs[name] = value
    return runs


def header(*columns: str) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def run_rows(runs: dict[str, Any]) -> list[str]:
    rows = header(
        "run", "attention", "k", "to /health s", "c=1 median TPOT ms", "decode tok/s",
        "vLLM 0.26 step ms",
    )  # fmt: skip
    for name, res in runs.items():
        meta = res["meta"]
        attention = meta.get("attention_backend", "(vLLM)")
        c1 = res.get("c1")
        if c1 is None:
            rows.append(f"| {name} | {attention} | {meta['k']} | – | "
                        f"{res.get('error', 'no measurement')} | – | – |")  # fmt: skip
            continue
        tpot = float(c1["median_tpot_ms"])
        vllm = VLLM_STEP_MS.get(int(meta["k"]))
        rows.append(
            f"| {name} | {attention} | {meta['k']} | {res.get('start_s', '–')} | "
            f"{tpot:.3f} | {1000 / tpot:.1f} | {f'{vllm:.3f}' if vllm else '–'} |"
        )
    return rows


def bench_rows(runs: dict[str, Any]) -> list[str]:
    rows = header(
        "run", "c", "dflashops bench tok/s", "client tok/s", "diff", "bench median TPOT ms",
        "acceptance length (/metrics)",
    )  # fmt: skip
    for name, res in runs.items():
        report = (res.get("bench") or {}).get("report")
        if not report:
            continue
        clients = {lv["concurrency"]: lv for lv in res.get("client_levels", [])}
        for level in report["levels"]:
            c = level["max_concurrency"]
            ours = float(level["output_throughput"])
            theirs = clients.get(c, {}).get("output_tok_s")
            diff = f"{(ours / theirs - 1) * 100:+.1f} %" if theirs else "–"
            al = level.get("spec_decode_acceptance_length")
            rows.append(
                f"| {name} | {c} | {ours:.1f} | {f'{theirs:.1f}' if theirs else '–'} | {diff} | "
                f"{float(level['median_tpot_ms']):.3f} | {f'{al:.3f}' if al else '–'} |"
            )
    return rows


def main() -> int:
    runs = merged([Path(p) for p in sys.argv[1:]])
    print("\n".join(run_rows(runs)))
    print()
    print("\n".join(bench_rows(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
