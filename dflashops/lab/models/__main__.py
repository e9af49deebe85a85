"""``python -m dflashops.lab.models OUT [--seed N] [--without-dflash]``: build the lab models.

Runs in the lab's vLLM venv: the DFlash drafter's data stage serves the trained target with that
venv's vLLM (found from this interpreter's ``sys.prefix``). ``--without-dflash`` builds only the
deterministic part (tokenizer, trained target, identical and decaying drafts, prompts), without
a manifest, for checking that a rebuild is byte-identical.

Progress goes to stdout as one JSON object per line (``{"message": ...}``), which the
``dflashops lab models`` command turns into a progress display.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

from dflashops.lab.errors import LabError
from dflashops.lab.models import build_lab_models
from dflashops.lab.runtime import find_runtime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflashops.lab.models")
    parser.add_argument("out", type=Path, help="folder to build into (replaced)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--without-dflash", action="store_true")
    args = parser.parse_args(argv)
    started = time.monotonic()
    # SIGTERM (the caller's timeout) unwinds like Ctrl-C, so the vLLM server this build started
    # for the drafter's data stage is stopped on the way out instead of left running
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))

    def progress(message: str) -> None:
        elapsed = round(time.monotonic() - started, 1)
        print(json.dumps({"message": message, "elapsed_s": elapsed}), flush=True)

    runtime = None
    if not args.without_dflash:
        runtime = find_runtime(Path(sys.prefix))
        if runtime is None:
            raise LabError(f"{sys.prefix} is not the lab's vLLM runtime (no finished install)")
    build_lab_models(args.out, seed=args.seed, progress=progress, runtime=runtime)
    return 0


if __name__ == "__main__":
    sys.exit(main())
