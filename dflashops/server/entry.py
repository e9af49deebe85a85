"""``python -m dflashops.server --spec FILE``: preflight, then replace this process by the engine.

On a failed check it prints ONE line on stderr (``dflashops-server: <check>: <why>``) and exits
with a code from :class:`~dflashops.server.preflight.ExitCode`, so a supervisor or ``launch``
can tell a missing drafter from a missing GPU without reading a log. The report JSON goes to
``spec.preflight_report`` (when set) in both cases; ``--preflight-only`` also prints it.

Anything else that goes wrong (a bug, a spec value of a type nothing checked) is one line too,
``dflashops-server: internal: <exception>``, and exit 1; ``--debug`` or ``DFLASHOPS_DEBUG=1``
lets the traceback through instead.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from dflashops.server.preflight import ExitCode, PreflightReport, run_preflight
from dflashops.server.spec import ServerSpec, SpecError

PROG = "dflashops-server"
# what Python exits with on an uncaught exception: distinct from every ExitCode of a check
INTERNAL_EXIT = 1


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: {' '.join(message.split())}", file=sys.stderr, flush=True)
    return code


def _write_report(report: PreflightReport, path: str | None) -> str | None:
    """Write the report; return a problem description instead of raising."""
    if not path:
        return None
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(report.to_json(), encoding="utf-8")
        tmp.replace(target)
    except OSError as exc:
        return f"cannot write preflight report {path}: {exc.strerror or exc}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dflashops.server",
        description="Preflight an inference engine launch, then exec the engine.",
    )
    parser.add_argument("--spec", required=True, help="server spec JSON file")
    parser.add_argument(
        "--preflight-only",
        action="store_true",
        help="run the checks, print the report JSON and exit (no engine start)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="let an unexpected exception's traceback through (also DFLASHOPS_DEBUG=1)",
    )
    parser.add_argument(
        "--collective-check",
        action="store_true",
        help="also run one all-reduce across the tensor-parallel GPUs (NCCL), checking the sum "
        "and recording the bus bandwidth, before a long model load (the spec's "
        "collective_check turns it on for every launch)",
    )
    args = parser.parse_args(argv)
    try:
        return _run(args)
    except Exception as exc:
        if args.debug or os.environ.get("DFLASHOPS_DEBUG", "") not in ("", "0"):
            raise
        what = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if len(what) > 300:
            what = what[:299] + "…"  # one line a supervisor's log can show
        return _fail(f"internal: {what} (DFLASHOPS_DEBUG=1 shows the traceback)", INTERNAL_EXIT)


def _run(args: argparse.Namespace) -> int:
    try:
        spec = ServerSpec.from_file(args.spec)
    except SpecError as exc:
        return _fail(f"spec {args.spec}: {exc}", ExitCode.SPEC)
    if args.collective_check:
        spec = replace(spec, collective_check=True)

    # The spec's env applies before torch is imported (CUDA_VISIBLE_DEVICES must count).
    os.environ.update(spec.env)
    report = run_preflight(spec, dict(os.environ))
    write_problem = _write_report(report, spec.preflight_report)
    if args.preflight_only:
        print(report.to_json(), end="", flush=True)
    if not report.ok:
        return _fail(f"{report.failed_check}: {report.message}", report.exit_code)
    if write_problem:
        return _fail(write_problem, ExitCode.SPEC)
    if args.preflight_only:
        return ExitCode.OK
    return _exec_engine(spec, report)


def _exec_engine(spec: ServerSpec, report: PreflightReport) -> int:
    env = {**os.environ, **report.exec_env}
    if spec.pidfile:
        try:
            Path(spec.pidfile).write_text(f"{os.getpid()}\n", encoding="utf-8")
        except OSError as exc:
            return _fail(f"cannot write pidfile {spec.pidfile}: {exc.strerror}", ExitCode.SPEC)
    added = " ".join(f"{k}={v}" for k, v in sorted(report.exec_env.items()))
    print(
        f"{PROG}: preflight ok in {report.duration_s:.2f}s; exec {spec.argv[0]}"
        + (f" with {added}" if added else ""),
        file=sys.stderr,
        flush=True,
    )
    try:
        os.execvpe(spec.argv[0], spec.argv, env)
    except OSError as exc:
        return _fail(f"engine: cannot exec {spec.argv[0]}: {exc.strerror or exc}", ExitCode.ENGINE)
    return ExitCode.ENGINE  # not reached: execvpe returns only by raising
