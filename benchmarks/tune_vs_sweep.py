"""Live ``tune`` (budget 4) against an exhaustive sweep of k, on the lab's decaying draft model.

Run on demand, with the lab up and lab-ct1 provisioned::

    .venv/bin/dflashops lab up && .venv/bin/dflashops provision lab-ct1 --yes
    .venv/bin/python benchmarks/tune_vs_sweep.py [--passes 2] [--tunes 3] [--requests 6]

The sweep launches real vLLM (CPU) at every k in [k-min, k-max] and benches it, ``--passes``
times (every other pass in reverse order, so slow drift of this shared machine cancels instead of
favouring one end of the range). Each ``--tunes`` run is the real ``tune lab-ct1`` loop
(``dflashops.tune.live.live_tune``: budgeted launches, fit, k*, verify) on a fresh copy of
``playbooks/lab-decay.yaml``; tune runs are interleaved with the sweep passes.

The score of a tune run is the sweep's mean throughput at the k it picked over the sweep's best
mean: issue 10 asks for at least 0.97. Both sides use the tuner's own metric, the single-stream
decode rate 1000 / mean TPOT. The JSON result goes to ``benchmarks/results/``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflashops.bench.container import bench_container  # noqa: E402
from dflashops.bench.runner import BenchSettings  # noqa: E402
from dflashops.inventory.load import Inventory, load_inventory  # noqa: E402
from dflashops.lab.paths import lab_paths  # noqa: E402
from dflashops.launch.core import launch  # noqa: E402
from dflashops.playbook.load import load_playbook  # noqa: E402
from dflashops.tune.live import LiveTuneJob, live_tune  # noqa: E402
from dflashops.tune.runs import measured_throughput  # noqa: E402
from dflashops.tune.source import load_runs  # noqa: E402

PLAYBOOK = REPO / "playbooks" / "lab-decay.yaml"
TARGET = 0.97
T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - T0:7.1f}s] {message}", flush=True)


def sweep_pass(
    inventory: Inventory, args: argparse.Namespace, ks: list[int], workdir: Path, index: int
) -> dict[int, float]:
    """Launch and bench every k once; the decode rate per k."""
    rates: dict[int, float] = {}
    for k in ks:
        book = load_playbook(PLAYBOOK, [f"server.num_speculative_tokens={k}"])
        launch(inventory, args.container, book)
        settings = BenchSettings.from_playbook(
            book, concurrency=(1,), requests=args.requests, label=f"sweep k={k}"
        )
        report = bench_container(inventory, args.container, book, settings)
        path = report.save(workdir / f"sweep-{index}-k{k}.json")
        rate = measured_throughput(load_runs(path)[0])
        assert rate is not None
        rates[k] = rate
        say(f"sweep pass {index + 1}: k={k} {rate:.1f} tok/s")
    return rates


def tune_once(
    inventory: Inventory, args: argparse.Namespace, workdir: Path, index: int
) -> dict[str, Any]:
    book = workdir / f"tune-{index}" / "lab-decay.yaml"
    book.parent.mkdir(parents=True)
    shutil.copy(PLAYBOOK, book)
    job = LiveTuneJob(
        container=args.container,
        playbook_path=book,
        k_min=args.k_min,
        k_max=args.k_max,
        budget=args.budget,
        requests=args.requests,
        workdir=book.parent,
    )
    started = time.monotonic()
    outcome = live_tune(inventory, job).outcome
    say(
        f"tune {index + 1}: k*={outcome.best_k} after launches {outcome.launches}, "
        f"predicted {outcome.predicted_tok_s:.1f}, measured {outcome.measured_tok_s or 0:.1f} tok/s"
    )
    return {
        "best_k": outcome.best_k,
        "launches": outcome.launches,
        "predicted_tok_s": outcome.predicted_tok_s,
        "measured_tok_s": outcome.measured_tok_s,
        "start_tok_s": outcome.start_tok_s,
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-i", "--inventory", type=Path, default=None)
    parser.add_argument("--container", default="lab-ct1")
    parser.add_argument("--k-min", type=int, default=1)
    parser.add_argument("--k-max", type=int, default=6)
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--passes", type=int, default=2, help="sweep passes")
    parser.add_argument("--tunes", type=int, default=3, help="live tune runs")
    parser.add_argument("--requests", type=int, default=6, help="measured requests per bench")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    inventory = load_inventory(args.inventory or lab_paths().inventory)
    ks = list(range(args.k_min, args.k_max + 1))
    workdir = Path(tempfile.mkdtemp(prefix="tune-vs-sweep-"))
    passes: list[dict[int, float]] = []
    tunes: list[dict[str, Any]] = []
    # interleave: sweep, tune, reversed sweep, tune, … so both see the same machine conditions
    for step in range(max(args.passes, args.tunes)):
        if step < args.passes:
            order = ks if step % 2 == 0 else ks[::-1]
            passes.append(sweep_pass(inventory, args, order, workdir, step))
        if step < args.tunes:
            tunes.append(tune_once(inventory, args, workdir, step))

    mean = {k: statistics.fmean(p[k] for p in passes) for k in ks}
    spread = {
        k: (statistics.stdev([p[k] for p in passes]) / mean[k] if len(passes) > 1 else None)
        for k in ks
    }
    best_k = max(ks, key=lambda k: mean[k])
    for tune in tunes:
        tune["sweep_tok_s_at_best_k"] = mean[tune["best_k"]]
        tune["score"] = mean[tune["best_k"]] / mean[best_k]
        tune["within_3pct"] = tune["score"] >= TARGET
    result = {
        "kind": "dflashops-tune-vs-sweep",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "playbook": str(PLAYBOOK.relative_to(REPO)),
        "k_range": [args.k_min, args.k_max],
        "budget": args.budget,
        "requests_per_bench": args.requests,
        "sweep_passes": [{str(k): rate for k, rate in p.items()} for p in passes],
        "sweep_mean_tok_s": {str(k): mean[k] for k in ks},
        "sweep_relative_stdev": {str(k): spread[k] for k in ks},
        "sweep_best_k": best_k,
        "tunes": tunes,
        "all_within_3pct": all(t["within_3pct"] for t in tunes),
        "launches_sweep": len(ks) * len(passes),
        "launches_tune_mean": statistics.fmean(len(t["launches"]) for t in tunes) if tunes else 0,
    }
    out = (
        args.out
        or REPO / "benchmarks" / "results" / f"tune-vs-sweep-{datetime.now(UTC):%Y%m%d-%H%M}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")

    print("\n  k   sweep mean tok/s   rel. stdev")
    for k in ks:
        marker = "  <- sweep best" if k == best_k else ""
        dev = "-" if spread[k] is None else f"{spread[k]:.1%}"
        print(f"  {k:<3} {mean[k]:>16.1f}   {dev:>10}{marker}")
    print("\n  tune  k*  launches        score (sweep at k* / sweep best)")
    for index, tune in enumerate(tunes, 1):
        print(
            f"  {index:<5} {tune['best_k']:<3} {tune['launches']!s:<15} {tune['score']:.3f}"
            f"{'' if tune['within_3pct'] else '  BELOW 0.97'}"
        )
    print(f"\nsaved {out}")
    return 0 if result["all_within_3pct"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
