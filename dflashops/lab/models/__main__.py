"""``python -m dflashops.lab.models OUT [--seed N]``: build the lab models (in the vLLM venv).

Progress goes to stdout as one JSON object per line (``{"message": ...}``), which the
``dflashops lab models`` command turns into a progress display.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from dflashops.lab.models import build_lab_models


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dflashops.lab.models")
    parser.add_argument("out", type=Path, help="folder to build into (replaced)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    started = time.monotonic()

    def progress(message: str) -> None:
        elapsed = round(time.monotonic() - started, 1)
        print(json.dumps({"message": message, "elapsed_s": elapsed}), flush=True)

    build_lab_models(args.out, seed=args.seed, progress=progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
