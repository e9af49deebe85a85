"""Tables and checks of the issue-22 GPU run, off the GPU (reads what gpu_run.py brought back).

`python benchmarks/gpu_report.py RESULTS_DIR` reads ``RESULTS_DIR/results.json`` (and the
server logs next to it), runs ``dflashops tune-offline`` on the measured step times and the
acceptance each server reported, ``dflashops parse-log`` on the bench runs' logs, writes
``RESULTS_DIR/summary.json`` and prints the Markdown tables for RESULTS.md.

Step time at concurrency 1 = decode time / verify steps, with decode time = Σ TPOT × (tokens − 1)
over the requests and verify steps = the server's ``spec_decode_num_drafts`` delta (one draft per
step), or tokens − 1 per request without speculation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

SWEEPS = {
    "q8b": ["q8b-k1", "q8b-k2", "q8b-k4", "q8b-k8", "q8b-k15"],
    "tiny": ["tiny-k1", "tiny-k2", "tiny-k4"],
}
K_MAX = {"q8b": 15, "tiny": 4}  # the tiny drafter's block is 5: k ≤ 4
BENCH_RUNS = ("q8b-k4", "q8b-k0", "tiny-k4")


def step_seconds(c1: dict[str, Any]) -> float:
    drafts = c1["counters"]["drafts"]
    steps: float = drafts if drafts else c1["output_tokens"] - c1["requests"]
    return float(c1["decode_s"]) / float(steps)


def decode_tok_s(c1: dict[str, Any]) -> float:
    """Single-stream decode rate: 1000 / median TPOT (what tune predicts)."""
    return 1000.0 / float(c1["median_tpot_ms"])


def dflashops(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "dflashops", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        return {"rc": done.returncode, "stderr": done.stderr[-2000:]}
    return dict(json.loads(done.stdout))


def sweep(results: dict[str, Any], family: str, folder: Path) -> dict[str, Any]:
    rows, runs = [], []
    for name in SWEEPS[family]:
        res = results.get(name, {})
        if not res.get("done"):
            continue
        c1, k = res["c1"], res["meta"]["k"]
        step = step_seconds(c1)
        rows.append(
            {
                "run": name,
                "k": k,
                "step_ms": round(1000 * step, 3),
                "acceptance_length": round(c1["counters"]["acceptance_length"], 3),
                "per_position": c1["counters"]["per_position"],
                "decode_tok_s": round(decode_tok_s(c1), 1),
                "output_tok_s": round(c1["output_tok_s"], 1),
                "start_s": res["start_s"],
            }
        )
        runs.append(
            {
                "k": k,
                "step_time_s": step,
                "acceptance": c1["counters"]["per_position"],
                "num_drafts": int(c1["counters"]["drafts"]),
            }
        )
    runs_file = folder / f"tune-runs-{family}.json"
    runs_file.write_text(json.dumps({"runs": runs}, indent=2) + "\n")
    k_max = str(K_MAX[family])
    tune = dflashops("tune-offline", "--from", str(runs_file), "--k-max", k_max, "--json")
    best = max(rows, key=lambda r: r["decode_tok_s"]) if rows else None
    picked = next((r for r in rows if r["k"] == tune.get("best_k")), None)
    return {
        "rows": rows,
        "tune": {
            key: tune.get(key) for key in ("best_k", "best_throughput_tok_s", "step_cost", "rc")
        },
        "sweep_best_k": best["k"] if best else None,
        "tune_pick_vs_sweep_best": (picked["decode_tok_s"] / best["decode_tok_s"])
        if picked and best
        else None,
    }


def bench_vs_client(res: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for level, client in zip(res["bench"]["report"]["levels"], res["client_levels"], strict=True):
        bench_al = level.get("spec_decode_acceptance_length")
        client_al = client["counters"]["acceptance_length"]
        out.append(
            {
                "concurrency": level["max_concurrency"],
                "bench_tok_s": round(level["output_throughput"], 1),
                "client_tok_s": round(client["output_tok_s"], 1),
                "difference": round(level["output_throughput"] / client["output_tok_s"] - 1, 4),
                "bench_s": round(level["duration"], 2),
                "bench_acceptance_length": round(bench_al, 3) if bench_al else None,
                "client_acceptance_length": round(client_al, 3) if client_al else None,
                "bench_drafts": level.get("spec_decode_num_drafts"),
                "client_drafts": client["counters"]["drafts"],
                "bench_mean_ttft_ms": round(level["mean_ttft_ms"], 1),
                "client_median_ttft_ms": round(client["median_ttft_ms"], 1),
            }
        )
    return out


def counters_vs_log(res: dict[str, Any], log: Path) -> dict[str, Any] | None:
    """Accepted/drafted over the server's life: its log windows vs the /metrics deltas we took.

    The deltas leave out the warm-up requests, so the log must be at least as large and within
    the warm-ups' share of it."""
    if not log.exists():
        return None
    parsed = dflashops("parse-log", "--json", str(log))
    totals = parsed.get("spec_decode_totals") or {}
    levels = [res["c1"], *res["client_levels"]]
    accepted = sum(lv["counters"]["accepted_tokens"] for lv in levels)
    drafted = sum(lv["counters"]["draft_tokens"] for lv in levels)
    for level in res["bench"]["report"]["levels"]:
        accepted += level.get("spec_decode_accepted_tokens") or 0
        drafted += level.get("spec_decode_draft_tokens") or 0
    return {
        "log_windows": totals.get("windows"),
        "log_accepted": totals.get("accepted_tokens"),
        "log_drafted": totals.get("drafted_tokens"),
        "log_acceptance_length": totals.get("mean_acceptance_length"),
        "metrics_accepted_measured": accepted,
        "metrics_drafted_measured": drafted,
    }


def main() -> int:
    folder = Path(sys.argv[1])
    results = json.loads((folder / "results.json").read_text())
    summary: dict[str, Any] = {"facts": results.get("facts")}
    for family in SWEEPS:
        summary[f"sweep_{family}"] = sweep(results, family, folder)
    for name in BENCH_RUNS:
        res = results.get(name, {})
        if not res.get("done"):
            continue
        roof = res["bench"]["report"].get("roofline") or {}
        summary[name] = {
            "start_s": res["start_s"],
            "preflight": {
                "ok": res["preflight"]["ok"],
                "checks": [c["name"] for c in res["preflight"]["checks"]],
                "duration_s": res["preflight"]["duration_s"],
                "drafter_validation": (res["preflight"].get("drafter_validation") or {}).get(
                    "status"
                ),
            },
            "bench_vs_client": bench_vs_client(res),
            "roofline": {
                key: roof.get(key)
                for key in (
                    "bytes_per_step",
                    "ceiling_tok_s_at_al1",
                    "acceptance_length",
                    "ceiling_tok_s",
                    "measured_tok_s",
                    "fraction_of_ceiling",
                    "implied_bandwidth_gbps",
                )
            },
            "counters_vs_log": counters_vs_log(res, folder / f"{name}.log"),
        }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
