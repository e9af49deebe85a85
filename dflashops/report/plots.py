"""PNG plots of saved benchmarks (matplotlib, Agg backend, imported only when plotting).

- ``acceptance_per_position.png``: per draft position, the fraction of drafts whose token at
  that position was accepted (vLLM's per-position rate), one bar group per speculating run
  (``method: none`` runs are left out; a run whose drafter is broken shows as zeros).
- ``throughput_by_concurrency.png``: output tokens/s and mean TPOT against concurrency; a level
  the server stopped answering in is a hollow marker off the line.
- ``tune_throughput_by_k.png``, ``compare_methods.png`` and ``roofline.png``: see
  ``report.tune_plots``; ``tune_load.png`` (``tune --load``): see ``report.load_plots``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dflashops.bench.models import BenchReport, LevelResult
from dflashops.report.bench_view import LabelledReport
from dflashops.report.figure import save_figure, use_file_backend
from dflashops.report.load_plots import write_load_plots
from dflashops.report.tune_plots import write_tune_plots

if TYPE_CHECKING:
    from matplotlib.axes import Axes

ACCEPTANCE_PNG = "acceptance_per_position.png"
CONCURRENCY_PNG = "throughput_by_concurrency.png"


def combined_per_position(report: BenchReport) -> list[float]:
    """Per-position acceptance over all levels, each level weighted by its drafts."""
    levels = [lv for lv in report.levels if lv.spec_decode_per_position_acceptance_rates]
    width = max(
        (len(lv.spec_decode_per_position_acceptance_rates or []) for lv in levels), default=0
    )
    result = []
    for pos in range(width):
        pairs = [
            (rates[pos], lv.spec_decode_num_drafts or 1)
            for lv in levels
            if (rates := lv.spec_decode_per_position_acceptance_rates) and pos < len(rates)
        ]
        result.append(math.fsum(r * w for r, w in pairs) / sum(w for _, w in pairs))
    return result


def combined_acceptance_length(report: BenchReport) -> float | None:
    """1 + accepted / drafts over all levels."""
    drafts = sum(lv.spec_decode_num_drafts or 0 for lv in report.levels)
    accepted = sum(lv.spec_decode_accepted_tokens or 0 for lv in report.levels)
    return 1.0 + accepted / drafts if drafts else None


def write_plots(items: Sequence[LabelledReport], out_dir: Path) -> list[Path]:
    """Write every plot that has data; returns the files written."""
    use_file_backend()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    if any(
        item.report.config.method != "none" and combined_per_position(item.report) for item in items
    ):
        written.append(_acceptance_plot(items, out_dir / ACCEPTANCE_PNG))
    if any(item.report.levels for item in items):
        written.append(_concurrency_plot(items, out_dir / CONCURRENCY_PNG))
    return written + write_tune_plots(items, out_dir) + write_load_plots(items, out_dir)


def _acceptance_plot(items: Sequence[LabelledReport], path: Path) -> Path:
    import matplotlib.pyplot as plt

    series = [
        (item, rates)
        for item in items
        if item.report.config.method != "none" and (rates := combined_per_position(item.report))
    ]
    width = max(len(rates) for _, rates in series)
    fig, ax = plt.subplots(figsize=(min(14.0, max(6.5, 0.5 * width * len(series) + 3)), 4.8))
    bar = 0.8 / len(series)
    for index, (item, rates) in enumerate(series):
        xs = [pos - 0.4 + bar * (index + 0.5) for pos in range(len(rates))]
        length = combined_acceptance_length(item.report)
        label = item.label + (f" (AL {length:.2f})" if length is not None else "")
        bars = ax.bar(xs, rates, width=bar * 0.92, label=label)
        if len(series) * width <= 24:
            ax.bar_label(bars, labels=[f"{r:.2f}" for r in rates], fontsize=8, padding=2)
    ax.set_xticks(range(width))
    ax.set_xlabel("draft position (0 = first speculated token)")
    ax.set_ylabel("accepted / drafts")
    ax.set_ylim(0, 1.08)
    ax.set_title("Per-position acceptance (AL = mean tokens per verify step)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=min(3, len(series)))
    return save_figure(fig, path)


def _concurrency_plot(items: Sequence[LabelledReport], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    levels = sorted({lv.max_concurrency for item in items for lv in item.report.levels})
    for item in items:
        ordered = sorted(item.report.levels, key=lambda lv: lv.max_concurrency)
        whole = [lv for lv in ordered if not lv.incomplete]
        xs = [lv.max_concurrency for lv in whole]
        (line,) = left.plot(
            xs, [lv.output_throughput for lv in whole], marker="o", label=item.label
        )
        tpot = [(lv.max_concurrency, lv.mean_tpot_ms) for lv in whole if lv.mean_tpot_ms]
        right.plot([x for x, _ in tpot], [y for _, y in tpot], marker="o", color=line.get_color())
        cut_short = [lv for lv in ordered if lv.incomplete]
        _incomplete_points(left, right, cut_short, line.get_color(), f"{item.label} (incomplete)")
    _concurrency_axis(left, levels)
    left.set_ylabel("output tokens/s")
    left.set_title("Throughput (higher is better)")
    left.set_ylim(bottom=0)
    _concurrency_axis(right, levels)
    right.set_ylabel("mean TPOT (ms/token)")
    right.set_title("Time per output token (lower is better)")
    right.set_ylim(bottom=0)
    left.legend(fontsize=9)
    return save_figure(fig, path)


def _incomplete_points(
    left: Axes, right: Axes, levels: Sequence[LevelResult], colour: str, label: str
) -> None:
    """A level the server stopped answering in: its partial numbers as hollow markers, off the
    line (they measure a dying server, not the level)."""
    if not levels:
        return
    xs = [lv.max_concurrency for lv in levels]
    ys = [lv.output_throughput for lv in levels]
    left.scatter(xs, ys, marker="o", facecolors="none", edgecolors=colour, label=label)
    tpot = [(lv.max_concurrency, lv.mean_tpot_ms) for lv in levels if lv.mean_tpot_ms]
    xs, ys = [x for x, _ in tpot], [y for _, y in tpot]
    right.scatter(xs, ys, marker="o", facecolors="none", edgecolors=colour)


def _concurrency_axis(ax: Axes, levels: list[int]) -> None:
    if len(levels) > 2 and levels[-1] / levels[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(level) for level in levels])
    ax.minorticks_off()
    ax.set_xlabel("concurrency (requests in flight)")
    ax.grid(alpha=0.3)
