"""Can the lab's bench noise be measured away? Two checks behind issue 10's tune-vs-sweep result.

Run on demand, with the lab up (``paired`` also needs lab-ct2 provisioned)::

    .venv/bin/python benchmarks/lab_noise.py calibration [--k 2] [--benches 30]
    .venv/bin/python benchmarks/lab_noise.py paired [--k 2] [--ref-k 2] [--pairs 20] [--pin]

``calibration``: one launch in lab-ct1; right before and after every bench, three fixed CPU
probes are timed (a pure Python loop, a chain of small torch matmuls like a tiny model's decode,
a 64 MB copy). If a probe's speed tracked the bench rate, dividing it out would make ``tune``
and the sweep drift-aware. Reported: each probe's correlation with the rate and the rate's
relative spread before and after normalising by the probe.

``paired``: lab-ct1 at k and lab-ct2 at the reference k, benched alternately (ABBA). If the
noise came in spells longer than a pair, the ratio of the two would hold still while the rates
move. Run with k = ref-k, the ratio's spread is the floor of any paired comparison. ``--pin``
first binds every server process except vLLM's worker to the cores vLLM reserved for them: the
CPU build pins only its worker and lets the engine core, which busy-polls its shared-memory queue,
run on any core (the worker's included). The lab's containers share the host's process table,
so this binds both servers.

Rows go to ``benchmarks/results/lab-noise-<mode>-<date>.jsonl`` as they are measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflashops.bench.container import bench_container  # noqa: E402
from dflashops.bench.settings import BenchSettings  # noqa: E402
from dflashops.deployment.access import connect  # noqa: E402
from dflashops.inventory.load import Inventory, load_inventory  # noqa: E402
from dflashops.lab.paths import lab_paths  # noqa: E402
from dflashops.lab.runtime import default_venv  # noqa: E402
from dflashops.launch.core import launch  # noqa: E402
from dflashops.playbook.load import load_playbook  # noqa: E402
from dflashops.playbook.models import Playbook  # noqa: E402
from dflashops.tune.runs import measured_throughput  # noqa: E402
from dflashops.tune.source import load_runs  # noqa: E402

PLAYBOOK = REPO / "playbooks" / "lab-decay.yaml"
PROBES = ("python_loop", "torch_small_matmuls", "copy_64mb")

# one line on stdin: time each probe (median of 3) and print them as one JSON line
PROBE_WORKER = """
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(2)
W, X, A = torch.randn(256, 256), torch.randn(1, 256), np.ones(8_000_000)

def python_loop():
    s = 0
    for i in range(1_600_000):
        s += i * i

def torch_small_matmuls():
    x = X
    for _ in range(10_000):
        x = torch.tanh(x @ W)

def copy_64mb():
    for _ in range(14):
        A.copy()

def timed(probe):
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        probe()
        runs.append(time.perf_counter() - start)
    return sorted(runs)[1]

for _ in sys.stdin:
    probes = (python_loop, torch_small_matmuls, copy_64mb)
    print(json.dumps({p.__name__: timed(p) for p in probes}), flush=True)
"""

# the container's API server (found by its venv's path) and engine core (by its process name, which
# vLLM sets; /proc/PID/comm keeps 15 characters), not the worker, onto the reserved cores
PIN_COMMAND = (
    "for pid in $(pgrep -f /opt/dflashops/venv-vllm) $(pgrep -x VLLM::EngineCor); do "
    "taskset -a -pc {cores} $pid >/dev/null; done"
)


@dataclass
class Bench:
    """Benches one container's running server and returns its decode rate (1000 / mean TPOT)."""

    inventory: Inventory
    container: str
    book: Playbook
    requests: int
    workdir: Path
    count: int = 0

    def __call__(self) -> float:
        settings = BenchSettings.from_playbook(
            self.book, concurrency=(1,), requests=self.requests, label=self.container
        )
        report = bench_container(self.inventory, self.container, self.book, settings)
        self.count += 1
        path = report.save(self.workdir / f"{self.container}-{self.count}.json")
        rate = measured_throughput(load_runs(path)[0])
        assert rate is not None
        return rate


def launched(inventory: Inventory, container: str, k: int) -> Playbook:
    book = load_playbook(PLAYBOOK, [f"server.num_speculative_tokens={k}"])
    launch(inventory, container, book)
    return book


def calibration(args: argparse.Namespace, inventory: Inventory, out: Path) -> dict[str, Any]:
    book = launched(inventory, "lab-ct1", args.k)
    bench = Bench(inventory, "lab-ct1", book, args.requests, args.workdir)
    python = default_venv() / "bin" / "python"
    worker = subprocess.Popen(
        [str(python), "-c", PROBE_WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert worker.stdin is not None and worker.stdout is not None
    ask, answers = worker.stdin, worker.stdout

    def probe() -> dict[str, float]:
        ask.write("\n")
        ask.flush()
        return dict(json.loads(answers.readline()))

    rows = []
    for index in range(args.benches):
        before = probe()
        rate = bench()
        after = probe()
        rows.append({"k": args.k, "index": index, "rate": rate, "before": before, "after": after})
        record(out, rows[-1])
        print(f"{index:3} rate {rate:6.1f}  " + "  ".join(f"{p} {after[p]:.3f}" for p in PROBES))
    ask.close()
    worker.wait()
    rates = [row["rate"] for row in rows]
    summary: dict[str, Any] = {"benches": len(rows), "rate_relative_stdev": spread(rates)}
    for name in PROBES:
        speed = [2 / (row["before"][name] + row["after"][name]) for row in rows]
        mean_speed = statistics.fmean(speed)
        normalised = [r / (s / mean_speed) for r, s in zip(rates, speed, strict=True)]
        summary[name] = {
            "correlation_with_rate": statistics.correlation(speed, rates),
            "normalised_rate_relative_stdev": spread(normalised),
        }
    return summary


def paired(args: argparse.Namespace, inventory: Inventory, out: Path) -> dict[str, Any]:
    a_book = launched(inventory, "lab-ct1", args.k)
    b_book = launched(inventory, "lab-ct2", args.ref_k)
    a = Bench(inventory, "lab-ct1", a_book, args.requests, args.workdir)
    b = Bench(inventory, "lab-ct2", b_book, args.requests, args.workdir)
    if args.pin:
        with connect(inventory, "lab-ct1") as conn:
            conn.run(PIN_COMMAND.format(cores=args.pin))
    rows = []
    for index in range(args.pairs):
        order = (a, b) if index % 2 == 0 else (b, a)
        rates = {bench.container: bench() for bench in order}
        row = {"index": index, "k": args.k, "ref_k": args.ref_k, **rates}
        row["ratio"] = rates["lab-ct1"] / rates["lab-ct2"]
        rows.append(row)
        record(out, row)
        print(
            f"{index:3} {rates['lab-ct1']:6.1f} {rates['lab-ct2']:6.1f}  ratio {row['ratio']:.3f}"
        )
    ratios = [row["ratio"] for row in rows]
    return {
        "pairs": len(rows),
        "pinned": args.pin,
        "ratio_median": statistics.median(ratios),
        "ratio_range": [min(ratios), max(ratios)],
        "ratio_relative_stdev": spread(ratios),
        "lab-ct1_relative_stdev": spread([row["lab-ct1"] for row in rows]),
        "lab-ct2_relative_stdev": spread([row["lab-ct2"] for row in rows]),
    }


def spread(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def record(out: Path, row: dict[str, Any]) -> None:
    with out.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("calibration", "paired"))
    parser.add_argument("--k", type=int, default=2, help="k in lab-ct1")
    parser.add_argument("--ref-k", type=int, default=2, help="paired: k in lab-ct2")
    parser.add_argument("--benches", type=int, default=30, help="calibration: benches")
    parser.add_argument("--pairs", type=int, default=20, help="paired: A/B pairs")
    parser.add_argument("--requests", type=int, default=6, help="measured requests per bench")
    parser.add_argument(
        "--pin", default=None, metavar="CORES", help="paired: bind non-worker processes here (1)"
    )
    args = parser.parse_args()
    if min(args.benches, args.pairs) < 2:
        parser.error("--benches and --pairs need at least 2 (the summary is a spread)")

    inventory = load_inventory(lab_paths().inventory)
    stamp = f"{datetime.now(UTC):%Y%m%d-%H%M}"
    out = REPO / "benchmarks" / "results" / f"lab-noise-{args.mode}-{stamp}.jsonl"
    args.workdir = Path(tempfile.mkdtemp(prefix="lab-noise-"))  # the bench reports
    started = time.monotonic()
    summary = (calibration if args.mode == "calibration" else paired)(args, inventory, out)
    summary["seconds"] = round(time.monotonic() - started)
    record(out, {"summary": summary})
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
