"""The ``report`` step's run folder: the pair's plots (``report``'s own, from the bench and tune
JSON) and a short Markdown summary; ``record.json`` beside them is the JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dflashops.bench.models import BenchReport
from dflashops.report.bench_view import label_reports
from dflashops.report.plots import write_plots
from dflashops.up.outputs import BenchNumbers, TuneOutput
from dflashops.up.plan import STEPS
from dflashops.up.record import PairRecord

SUMMARY_FILE = "summary.md"
PLOTS_DIR = "plots"


def headline(record: PairRecord) -> dict[str, Any]:
    """tok/s, acceptance length and k the pair ends with: tuned when tune ran, else the bench."""
    for kind in (TuneOutput, BenchNumbers):
        out = kind.find(record)
        if out is not None and out.output_throughput is not None:
            return {
                "output_throughput": out.output_throughput,
                "spec_decode_acceptance_length": out.spec_decode_acceptance_length,
                "k": out.k,
                "from": kind.step,
            }
    return {}


def write_run_report(record: PairRecord, run_dir: Path) -> list[Path]:
    """Plots of the bench and tune reports, then ``summary.md``; returns the files written."""
    loaded = []
    bench, tune = BenchNumbers.find(record), TuneOutput.find(record)
    for name in (bench.file if bench else None, tune.report if tune else None):
        if name and Path(name).is_file():
            loaded.append((Path(name), BenchReport.load(Path(name))))
    plots = write_plots(label_reports(loaded), run_dir / PLOTS_DIR) if loaded else []
    summary = run_dir / SUMMARY_FILE
    summary.write_text(_markdown(record, plots), encoding="utf-8")
    return [summary, *plots]


def _markdown(record: PairRecord, plots: list[Path]) -> str:
    numbers = headline(record)
    lines = [
        f"# dflashops up: {record.playbook_name} on {record.container}",
        "",
        f"- playbook: `{record.playbook}`",
        f"- container: {record.container} (cluster {record.cluster}, node {record.node})",
    ]
    if numbers:
        length = numbers.get("spec_decode_acceptance_length")
        lines.append(
            f"- result ({numbers['from']}): {numbers['output_throughput']:.1f} output tok/s, "
            f"acceptance length {'-' if length is None else f'{length:.2f}'}, k={numbers['k']}"
        )
    lines += ["", "| step | status | result | seconds |", "|---|---|---|---|"]
    for step in STEPS:
        done = record.step(step)
        if done is None:
            continue
        text = (done.error or done.summary).replace("|", "\\|")
        seconds = "-" if done.seconds is None else f"{done.seconds:.1f}"
        lines.append(f"| {step} | {done.status} | {text} | {seconds} |")
    if plots:
        lines += ["", *(f"![{p.stem}]({PLOTS_DIR}/{p.name})" for p in plots)]
    return "\n".join(lines) + "\n"
