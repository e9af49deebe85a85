"""``python -m dflashops.training {data,prepare,train,export} --job PATH``: run one stage.

Runs in the engine venv (in a container, or the lab's runtime here). Progress goes to stdout as
one JSON object per line, ``{"message": ..., "elapsed_s": ...}``, and the last line is
``{"done": {...the stage's summary}}``. Everything else the stage's libraries print (progress
bars, warnings, their loggers) goes to ``logs/<stage>.log``, next to the stage's own record of
progress, so stdout stays JSON lines and stderr stays empty unless the stage fails: then it
exits 1 with one line on stderr (a bad job file exits 2), whatever the exception: an unexpected
one's traceback goes to the stage's log (``--debug`` or ``DFLASHOPS_DEBUG=1`` lets it through
instead). Once finished the stage writes ``stages/<stage>.json``; what a failed stage finished
is kept, so running it again continues.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from dflashops.errors import DflashopsError, shorten
from dflashops.training.job import STAGES, Stage, TrainingJob
from dflashops.training.stages import run_stage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflashops.training")
    parser.add_argument("stage", choices=STAGES)
    parser.add_argument("--job", type=Path, required=True, help="the run's job.json")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="let an unexpected exception's traceback through (also DFLASHOPS_DEBUG=1)",
    )
    args = parser.parse_args(argv)
    debug = args.debug or os.environ.get("DFLASHOPS_DEBUG", "") not in ("", "0")
    try:
        return _run(args.stage, args.job, debug=debug)
    except Exception as exc:
        # a bug or an environment the stage did not expect: one line, never a raw traceback
        if debug:
            raise
        print(
            f"error: {args.stage} stage: {_describe(exc)} (--debug shows the traceback)",
            file=sys.stderr,
        )
        return 1


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return shorten(f"{exc.filename}: {exc.strerror or exc}")
    return shorten(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)


def _run(stage: Stage, job_path: Path, *, debug: bool) -> int:
    try:
        job = TrainingJob.from_json(job_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        print(f"error: {job_path}: not a readable job file ({shorten(str(exc))})", file=sys.stderr)
        return 2
    started = time.monotonic()
    log = Path(job.paths.log(stage))
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        with _output_to(log) as protocol:

            def progress(message: str) -> None:
                elapsed = round(time.monotonic() - started, 1)
                protocol.write(json.dumps({"message": message, "elapsed_s": elapsed}) + "\n")
                protocol.flush()

            try:
                summary = run_stage(job, stage, progress)
            except Exception as exc:
                if not isinstance(exc, DflashopsError):
                    traceback.print_exc()  # fd 2 is the log here: next to the stage's output
                raise
    except DflashopsError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return exc.cli_exit_code
    except KeyboardInterrupt:
        print(f"error: {stage} stage interrupted (a rerun continues)", file=sys.stderr)
        return 130
    except Exception as exc:
        if debug:
            raise
        print(
            f"error: {stage} stage: {_describe(exc)} (the traceback is in {log})", file=sys.stderr
        )
        return 1
    print(json.dumps({"done": summary}), flush=True)
    return 0


@contextmanager
def _output_to(log: Path) -> Iterator[IO[str]]:
    """Point file descriptors 1 and 2 at ``log`` (so what libraries print, C code included,
    lands there) and yield a stream on the original stdout for the JSON lines."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    protocol = os.fdopen(os.dup(saved[0]), "w", encoding="utf-8")
    with log.open("a", encoding="utf-8") as sink:
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield protocol
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            protocol.close()


if __name__ == "__main__":
    sys.exit(main())
