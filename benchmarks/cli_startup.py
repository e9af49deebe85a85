"""How long `dflashops --help` takes next to `python -c "import click"` (issue 31: within 1.5x;
issue 2 asked 2x).

Run on demand: `.venv/bin/python benchmarks/cli_startup.py [RUNS]`. Prints a Markdown row for
benchmarks/RESULTS.md. Medians of RUNS fresh processes each, after one warm-up run; the two
commands alternate, so load from other work on the machine falls on both alike. Exits 1 when
the ratio is over the target.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

TARGET = 1.5


def seconds(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=True)
    return time.perf_counter() - started


def medians(commands: list[list[str]], runs: int) -> list[float]:
    """The median wall time of each command, run RUNS times in turn (after a warm-up each)."""
    for argv in commands:
        seconds(argv)  # warm the page cache
    times: list[list[float]] = [[] for _ in commands]
    for _ in range(runs):
        for argv, measured in zip(commands, times, strict=True):
            measured.append(seconds(argv))
    return [statistics.median(measured) for measured in times]


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    # this interpreter's own script first: another dflashops on PATH is another install
    own = Path(sys.prefix) / "bin" / "dflashops"
    cli = str(own) if own.is_file() else shutil.which("dflashops") or "dflashops"
    click_s, help_s = medians([[sys.executable, "-c", "import click"], [cli, "--help"]], runs)
    print("| runs | `python -c 'import click'` | `dflashops --help` | ratio |")
    print("|---|---|---|---|")
    ratio = help_s / click_s
    print(f"| {runs} | {click_s * 1000:.0f} ms | {help_s * 1000:.0f} ms | {ratio:.2f}x |")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
