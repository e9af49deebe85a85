"""How long `dflashops --help` takes next to `python -c "import click"` (issue 2: within 2x).

Run on demand: `.venv/bin/python benchmarks/cli_startup.py [RUNS]`. Prints a Markdown row for
benchmarks/RESULTS.md. Medians of RUNS fresh processes each, after one warm-up run.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time


def median_seconds(argv: list[str], runs: int) -> float:
    subprocess.run(argv, capture_output=True, check=True)  # warm the page cache
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    cli = shutil.which("dflashops") or f"{sys.prefix}/bin/dflashops"
    click_s = median_seconds([sys.executable, "-c", "import click"], runs)
    help_s = median_seconds([cli, "--help"], runs)
    print("| runs | `python -c 'import click'` | `dflashops --help` | ratio |")
    print("|---|---|---|---|")
    ratio = help_s / click_s
    print(f"| {runs} | {click_s * 1000:.0f} ms | {help_s * 1000:.0f} ms | {ratio:.2f}x |")
    return 0 if help_s <= 2 * click_s else 1


if __name__ == "__main__":
    raise SystemExit(main())
