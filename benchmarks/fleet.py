"""A fleet of containers (issue 36): how ``provision`` (creating, and with nothing to change),
``status``, ``up --dry-run``, ``up``'s provision step and ``destroy`` grow with the number of
containers, at 1, 10, 25 and 50 lab containers across the lab's two PVE nodes.

Run as root, on demand (about 4 minutes on 2 cores)::

    .venv/bin/python benchmarks/fleet.py [--sizes 1,10,25,50] [--parallel N] [--results]

An isolated lab of its own (bridge ``dfolabfb0``, 10.200.37.0/24, node hosts ``dfo-nodefb`` and
``dfo-nodefb2``; :mod:`tests.support.fleet_lab`), nothing shared with the default lab. Per size
N, containers ``fct1``..``fctN`` alternately on nodes ``lab`` and ``lab2`` (static addresses,
fixed vmids from 400, no GPUs), each command as an operator runs it (``python -m dflashops.cli``,
stdout and stderr pipes, wall time from spawn to exit, start-up included):

1. ``provision --yes``: creating N (create, start, address, SSH login, the steps inside);
2. ``provision --yes`` again: nothing to change;
3. ``status``;
4. ``up``'s provision step over N pairs (``lab-dflash`` on each container; in this process,
   the step table cut after provision, as the lab demo does: it writes the pairs' run records);
5. ``up lab-dflash -c fct1 … -c fctN --dry-run``: every pair planned (its record read, PVE's
   managed check, the drafter's files read over SSH);
6. ``destroy --yes`` of the N.

Free memory is read before each size (``/proc/meminfo``, as ``free -m`` shows it); a size is
skipped when what is free would not hold its containers. Rows go to
``benchmarks/results/fleet-<date>.json``; ``--results`` also rewrites the block between
``<!-- fleet:begin -->`` and ``<!-- fleet:end -->`` in RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflashops.inventory.load import load_inventory  # noqa: E402
from dflashops.playbook.load import resolve_playbook_path  # noqa: E402
from dflashops.up.request import UpRequest  # noqa: E402
from dflashops.up.runner import UpParts, run_up  # noqa: E402
from dflashops.up.steps import steps_until  # noqa: E402
from tests.support.fleet_lab import FleetLab, Timed, fleet_lab  # noqa: E402

CIDR = "10.200.37.0/24"  # issue 36 (the test uses .36)
# each lab container is a network namespace with its own sshd and overlays: 50 of them took
# 46 MiB of MemAvailable here (2026-12-04); 64 each is the margin a size must find free
MIB_PER_CONTAINER = 64
TARGETS_S = {  # the targets at 50 containers
    "provision (creating)": 30.0,
    "provision (nothing to change)": 10.0,
    "status": 5.0,
    "up --dry-run": 10.0,
    "destroy": 20.0,
}
ORDER = (
    "provision (creating)",
    "provision (nothing to change)",
    "status",
    "up: provision step (nothing to change)",
    "up --dry-run",
    "destroy",
)


def mem_available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


def expect_ok(done: Timed, what: str) -> None:
    if done.returncode != 0:
        raise SystemExit(f"{what} exited {done.returncode}: {done.stderr[-2000:]}")


def one_size(lab: FleetLab, size: int, parallel: int | None, state: Path) -> dict[str, Any]:
    names = lab.names(size)
    inventory = lab.inventory(names, file=f"fleet-{size}.yaml")
    extra = ("--parallel", str(parallel)) if parallel else ()
    row: dict[str, Any] = {"containers": size, "mem_available_mib_before": mem_available_mib()}
    timed: dict[str, float] = {}
    for label, args in (
        ("provision (creating)", ("provision", "--yes", *extra)),
        ("provision (nothing to change)", ("provision", "--yes", *extra)),
        ("status", ("status", *extra)),
    ):
        done = lab.run(inventory, *args)
        expect_ok(done, label)
        timed[label] = done.seconds
        print(f"  {size:>3} {label}: {done.seconds:.1f} s", flush=True)
    row["mem_available_mib_with_containers"] = mem_available_mib()
    book = resolve_playbook_path("lab-dflash")
    request = UpRequest(
        playbooks=(book,), containers=tuple(names), state_dir=state, parallel=parallel
    )
    started = time.monotonic()
    result = run_up(load_inventory(inventory), request, parts=UpParts(steps_until("provision")))
    timed["up: provision step (nothing to change)"] = time.monotonic() - started
    bad = [p.line() for p in result.pairs if p.outcome != "stopped"]
    if bad:
        raise SystemExit(f"up's provision step: {bad}")
    print(
        f"  {size:>3} up: provision step: {timed['up: provision step (nothing to change)']:.1f} s"
    )
    pairs = [arg for name in names for arg in ("-c", name)]
    done = lab.run(
        inventory,
        "up",
        "lab-dflash",
        *pairs,
        "--dry-run",
        *extra,
        env={"DFLASHOPS_UP_STATE": str(state)},
    )
    expect_ok(done, "up --dry-run")
    timed["up --dry-run"] = done.seconds
    print(f"  {size:>3} up --dry-run: {done.seconds:.1f} s", flush=True)
    done = lab.run(inventory, "destroy", "--yes", *names, *extra)
    expect_ok(done, "destroy")
    timed["destroy"] = done.seconds
    print(f"  {size:>3} destroy: {done.seconds:.1f} s", flush=True)
    row["seconds"] = {label: round(timed[label], 2) for label in ORDER}
    return row


def table(rows: list[dict[str, Any]]) -> list[str]:
    sizes = [row["containers"] for row in rows]
    head = "| command | " + " | ".join(f"{n} ct" for n in sizes) + " | target at 50 |"
    lines = [head, "|---|" + "---|" * len(sizes) + "---|"]
    for label in ORDER:
        cells = [f"{row['seconds'][label]:.1f} s" for row in rows]
        target = f"≤ {TARGETS_S[label]:.0f} s" if label in TARGETS_S else "-"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {target} |")
    per = [
        f"{row['containers']} ct: "
        + ", ".join(
            f"{label.split(' (')[0]} {row['seconds'][label] / row['containers']:.2f}"
            for label in ("provision (creating)", "status", "destroy")
        )
        for row in rows
    ]
    return [*lines, "", "Seconds per container: " + "; ".join(per) + "."]


def write_results(block: list[str]) -> None:
    path = REPO / "benchmarks" / "RESULTS.md"
    text = path.read_text()
    begin, end = "<!-- fleet:begin -->", "<!-- fleet:end -->"
    if begin not in text:
        raise SystemExit(f"{path}: no {begin} marker (add the section first)")
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    path.write_text(head + begin + "\n" + "\n".join(block) + "\n" + end + tail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,10,25,50")
    parser.add_argument(
        "--parallel", type=int, help="--parallel of every command (default: the inventory's, 8)"
    )
    parser.add_argument("--results", action="store_true", help="rewrite the block in RESULTS.md")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    stamp = datetime.now(UTC)
    tmp = Path(tempfile.mkdtemp(prefix="dfo-fleet-"))
    rows = []
    with fleet_lab(tmp, tag="fb", cidr=CIDR) as lab:
        for size in sizes:
            free = mem_available_mib()
            if free < size * MIB_PER_CONTAINER + 1024:
                print(f"skipping {size}: {free} MiB free, {size} containers want more")
                continue
            print(f"{size} containers ({free} MiB free)", flush=True)
            rows.append(one_size(lab, size, args.parallel, tmp / f"up-{size}"))
    command = "python benchmarks/fleet.py " + shlex.join(sys.argv[1:])
    block = [
        f"Date: {stamp:%Y-%m-%d %H:%M} UTC  ",
        f"Machine: {platform.system()} {platform.release()}, "
        f"{platform.processor() or platform.machine()}, 2 CPUs shared with other work  ",
        f"Command: `{command.strip()}`",
        "",
        *table(rows),
    ]
    print("\n".join(block))
    out = REPO / "benchmarks" / "results" / f"fleet-{stamp:%Y%m%d-%H%M}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps({"command": command, "date": stamp.isoformat(), "rows": rows}, indent=2) + "\n"
    )
    print(f"wrote {out}")
    if args.results:
        write_results(block)


if __name__ == "__main__":
    main()
