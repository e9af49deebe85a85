"""PNG plots of the ``tune``, ``compare`` and ``roofline`` sections of saved reports
(matplotlib, Agg).

- ``tune_throughput_by_k.png``: the tuner's predicted single-stream throughput per k, the runs it
  measured, k* and, when the report has a roofline, the bandwidth ceiling × acceptance length.
- ``compare_methods.png``: output tokens/s per speculative method, acceptance length on each bar.
- ``roofline.png``: per report, the concurrency-1 decode rate next to the bandwidth ceiling
  × acceptance length, labelled with the share reached (red when above: a measurement error).

The sections are read as the JSON they were saved as (``LiveTuneOutcome.section``,
``CompareOutcome.section``, ``TuneResult``), so an older report with fewer keys still plots.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dflashops.report.bench_view import LabelledReport
from dflashops.report.figure import save_figure

TUNE_PNG = "tune_throughput_by_k.png"
COMPARE_PNG = "compare_methods.png"
ROOFLINE_PNG = "roofline.png"


def tune_series(tune: dict[str, Any]) -> tuple[list[tuple[int, float, float | None]], int | None]:
    """(k, predicted tok/s, roofline ceiling or None) per k, and k*, from a ``tune`` section."""
    result = tune.get("result") or {}
    points = [
        (int(p["k"]), float(p["throughput_tok_s"]), p.get("ceiling_tok_s"))
        for p in result.get("predictions", [])
    ]
    best = tune.get("best_k", result.get("best_k"))
    return points, None if best is None else int(best)


def measured_points(tune: dict[str, Any]) -> list[tuple[int, float]]:
    """(k, measured tok/s) of every probe run and of the verify run."""
    runs = [*tune.get("runs", []), *([tune["verify"]] if tune.get("verify") else [])]
    return [(int(run["k"]), float(run["output_tok_s"])) for run in runs if run.get("output_tok_s")]


def write_tune_plots(items: Sequence[LabelledReport], out_dir: Path) -> list[Path]:
    """The tune and compare plots that the reports have data for."""
    written: list[Path] = []
    tuned = [item for item in items if item.report.tune and tune_series(item.report.tune)[0]]
    if tuned:
        written.append(_tune_plot(tuned, out_dir / TUNE_PNG))
    compared = [item for item in items if item.report.compare and item.report.compare.get("rows")]
    if compared:
        written.append(_compare_plot(compared, out_dir / COMPARE_PNG))
    roofed = [item for item in items if (item.report.roofline or {}).get("ceiling_tok_s")]
    if roofed:
        written.append(_roofline_plot(roofed, out_dir / ROOFLINE_PNG))
    return written


def _tune_plot(items: Sequence[LabelledReport], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.8))
    for item in items:
        tune = item.report.tune or {}
        points, best = tune_series(tune)
        ks = [k for k, _, _ in points]
        (line,) = ax.plot(ks, [tok for _, tok, _ in points], marker="o", label=f"{item.label}")
        measured = measured_points(tune)
        if measured:
            ax.scatter(
                [k for k, _ in measured],
                [tok for _, tok in measured],
                marker="x",
                s=60,
                color=line.get_color(),
                label=f"{item.label}: measured",
            )
        if best is not None:
            ax.axvline(best, color=line.get_color(), linestyle="--", alpha=0.6)
            ax.annotate(f"k*={best}", (best, ax.get_ylim()[1]), ha="left", va="top", fontsize=9)
        ceilings = [(k, c) for k, _, c in points if c]
        if ceilings:
            ax.plot(
                [k for k, _ in ceilings],
                [c for _, c in ceilings],
                linestyle=":",
                color=line.get_color(),
                label=f"{item.label}: roofline × AL",
            )
    ax.set_xlabel("num_speculative_tokens (k)")
    ax.set_ylabel("single-stream output tokens/s")
    ax.set_title("Predicted throughput per k (line), measured runs (x), k* (dashed)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def _compare_plot(items: Sequence[LabelledReport], path: Path) -> Path:
    import matplotlib.pyplot as plt

    rows = [(item.label, row) for item in items for row in (item.report.compare or {})["rows"]]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(rows) + 2), 4.6))
    engines = len({row.get("engine") for _, row in rows}) > 1
    names = [
        (f"{row['engine']}\n" if engines else "")
        + (
            f"{row['method']}" + (f"\nk={row['k']}" if row.get("k") else "")
            if len(items) == 1
            else f"{label}\n{row['method']}"
        )
        for label, row in rows
    ]
    bars = ax.bar(range(len(rows)), [row["output_tok_s"] for _, row in rows])
    notes = [
        f"{row['output_tok_s']:.1f}"
        + (f"\nAL {row['acceptance_length']:.2f}" if row.get("acceptance_length") else "")
        for _, row in rows
    ]
    ax.bar_label(bars, labels=notes, fontsize=8, padding=2)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(names, fontsize=9)
    ax.set_ylabel("output tokens/s")
    what = "engine and method" if engines else "speculative method"
    ax.set_title(f"Same workload per {what} (AL = tokens per verify step)")
    ax.set_ylim(0, max(row["output_tok_s"] for _, row in rows) * 1.25)
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path)


def _roofline_plot(items: Sequence[LabelledReport], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(items) + 2), 4.6))
    xs = list(range(len(items)))
    roofs = [item.report.roofline or {} for item in items]
    ceilings = [float(roof["ceiling_tok_s"]) for roof in roofs]
    measured = [float(roof.get("measured_tok_s") or 0.0) for roof in roofs]
    ax.bar([x + 0.2 for x in xs], ceilings, width=0.4, color="#bbbbbb", label="ceiling × AL")
    colours = ["#d62728" if roof.get("above_ceiling") else "#1f77b4" for roof in roofs]
    bars = ax.bar([x - 0.2 for x in xs], measured, width=0.4, color=colours, label="measured")
    shares = [
        f"{roof['fraction_of_ceiling']:.0%}" if roof.get("fraction_of_ceiling") else "n/a"
        for roof in roofs
    ]
    ax.bar_label(bars, labels=shares, fontsize=9, padding=2)
    ax.set_xticks(xs)
    ax.set_xticklabels(
        [
            f"{item.label}\nAL {roof['acceptance_length']:.2f}"
            for item, roof in zip(items, roofs, strict=True)
        ],
        fontsize=9,
    )
    ax.set_ylabel("single-stream output tokens/s")
    ax.set_title("Concurrency 1 vs the bandwidth roofline (% = share of the ceiling)")
    ax.set_ylim(0, max(ceilings + measured) * 1.15)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
