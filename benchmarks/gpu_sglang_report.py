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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_report

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
        vllm = VLLM_STEP_MS.get(int(meta["k"]))
        rows.append(
            f"| {name} | {attention} | {meta['k']} | {res.get('start_s', '–')} | "
            f"{float(c1['median_tpot_ms']):.3f} | {gpu_report.decode_tok_s(c1):.1f} | "
            f"{f'{vllm:.3f}' if vllm else '–'} |"
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
        # the pairing issue 22's report made for vLLM, the same for SGLang
        for pair, level in zip(gpu_report.bench_vs_client(res), report["levels"], strict=True):
            al = pair["bench_acceptance_length"]
            rows.append(
                f"| {name} | {pair['concurrency']} | {pair['bench_tok_s']:.1f} | "
                f"{pair['client_tok_s']:.1f} | {100 * pair['difference']:+.1f} % | "
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
