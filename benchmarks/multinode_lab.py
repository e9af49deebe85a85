"""One member vs two (issue 24): time from ``launch`` to ready, and TTFT/TPOT at concurrency 1,
for the lab target served from one lab container and across two (vLLM's native multi-node
launcher, tensor-parallel 2), in one run, alternating.

Run as root, on demand (it holds the machine-wide vLLM slot; ~6 min for two rounds)::

    .venv/bin/python benchmarks/multinode_lab.py [--rounds 2] [--requests 8] [--max-tokens 64]

An isolated lab of its own (bridge ``dfolabb0``, 10.200.25.0/24) with containers ``bct1`` on PVE
node ``lab`` and ``bct2`` on ``lab2`` (the lab's two-node cluster): each round launches the plain
target in ``bct1`` alone, benches it, then launches it
across ``bct1`` + ``bct2`` and benches that, through ``launch`` and ``bench --url`` as an operator
runs them. Both "nodes" are network namespaces on this 2-core machine, so the two-member case
measures the runtime's overhead (gloo over a veth pair, a second engine process), not a faster
model. Rows go to ``benchmarks/results/multinode-lab-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflashops.bench.entry import run_bench  # noqa: E402
from dflashops.bench.request import BenchRequest, SettingsRequest  # noqa: E402
from dflashops.launch.control import stop_server  # noqa: E402
from dflashops.launch.core import launch  # noqa: E402
from tests.support.multinode_lab import MultiLab, lab_playbook, multinode_lab  # noqa: E402
from tests.support.vllm_slot import VllmSlot  # noqa: E402

HEAD, WORKER = "bct1", "bct2"
CONTAINERS = {HEAD: (991, "10.200.25.30"), WORKER: (992, "10.200.25.31")}
NODES = {HEAD: "lab", WORKER: "lab2"}


def measure(lab: MultiLab, case: str, args: argparse.Namespace) -> dict[str, Any]:
    placement = None
    if case == "two members":
        placement = {"members": [HEAD, WORKER], "tensor_parallel_size": 2}
    book = lab_playbook(HEAD, placement)
    started = time.monotonic()
    report = launch(lab.inventory, HEAD, book, timeout_s=400)
    wall = time.monotonic() - started
    bench = run_bench(
        BenchRequest(
            url=lab.endpoint(HEAD),
            model="tiny",
            settings=SettingsRequest(
                workload="smoke",
                concurrency=(1,),
                requests=args.requests,
                warmup_requests=2,
                max_tokens=args.max_tokens,
                temperature=0,
                ignore_eos=True,
            ),
        ),
        lambda: lab.inventory,
    )
    level = bench.levels[0]
    stop_server(lab.inventory, HEAD)
    return {
        "case": case,
        "action": report.action,
        "launch_to_ready_s": round(wall, 1),
        "ready_in_s": report.ready_in_s,
        "phases": report.phases,
        "completed": level.completed,
        "mean_ttft_ms": level.mean_ttft_ms,
        "median_ttft_ms": level.median_ttft_ms,
        "mean_tpot_ms": level.mean_tpot_ms,
        "median_tpot_ms": level.median_tpot_ms,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    out = REPO / "benchmarks" / "results" / f"multinode-lab-{datetime.now(UTC):%Y%m%d}.json"
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="dfo-multinode-"))
    cidr = "10.200.25.0/24"
    with (
        VllmSlot(),
        multinode_lab(tmp, tag="b", cidr=cidr, containers=CONTAINERS, nodes=NODES) as lab,
    ):
        for round_ in range(args.rounds):
            for case in ("one member", "two members"):
                row = {"round": round_ + 1, **measure(lab, case, args)}
                print(json.dumps(row), flush=True)
                rows.append(row)
    doc = {"rows": rows, "args": vars(args), "nodes": NODES}
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
