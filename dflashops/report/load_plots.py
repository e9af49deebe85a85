"""``tune_load.png``: throughput against concurrency per k and for the schedule, from the
``tune["load"]`` section ``tune --load`` saves (``dflashops.tune.load_section``; read here as
plain JSON: ``report`` and ``tune`` share a layer and do not import each other).

Left: aggregate output tok/s against concurrency, one colour per k launched (measured points,
the model's line through every level), the schedule (its verification bench when there is one,
else k*(level)'s scores) in black; the levels from which speculation off (k = 0) wins are shaded
and labelled "speculation stops paying". Right: the k each batch size runs under the schedule.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dflashops.report.bench_view import LabelledReport
from dflashops.report.figure import save_figure, use_file_backend

if TYPE_CHECKING:
    from matplotlib.axes import Axes

LOAD_PNG = "tune_load.png"


@dataclass(frozen=True)
class LoadPlotData:
    """The series the plot draws, taken out of a ``load`` section."""

    levels: list[int]
    predicted: dict[int, list[tuple[int, float]]]
    measured: dict[int, list[tuple[int, float]]]
    schedule: list[tuple[int, float]]
    schedule_measured: bool
    ranges: list[tuple[int, int, int]]
    k_by_level: dict[int, int]
    stops_paying_at: int | None
    verdict: str | None


def load_plot_data(section: Mapping[str, Any]) -> LoadPlotData | None:
    """The plot's series, or None when the section has no levels to plot."""
    levels = [int(level) for level in section.get("levels") or []]
    if not levels:
        return None
    launched = sorted({int(run["k"]) for run in section.get("runs") or []})
    measured: dict[int, list[tuple[int, float]]] = {k: [] for k in launched}
    for run in section.get("runs") or []:
        measured[int(run["k"])].append((int(run["level"]), float(run["output_tok_s"])))
    predicted: dict[int, list[tuple[int, float]]] = {k: [] for k in launched}
    for row in section.get("predictions") or []:
        k = int(row["k"])
        value = row.get("predicted_tok_s")
        if value is None:
            value = row.get("measured_tok_s")
        if k in predicted and value is not None:
            predicted[k].append((int(row["level"]), float(value)))
    k_by_level = {int(level): int(k) for level, k in (section.get("k_by_level") or {}).items()}
    decision = section.get("decision") or {}
    verdict = section.get("verdict") or None
    return LoadPlotData(
        levels=levels,
        predicted={k: sorted(points) for k, points in predicted.items() if points},
        measured={k: sorted(points) for k, points in measured.items()},
        schedule=_schedule_series(section, k_by_level),
        schedule_measured=bool(section.get("verify")),
        ranges=[(int(a), int(b), int(k)) for a, b, k in decision.get("schedule") or []],
        k_by_level=k_by_level,
        stops_paying_at=section.get("stops_paying_at"),
        verdict=None if verdict is None else str(verdict.get("sentence")),
    )


def write_load_plots(items: Sequence[LabelledReport], out_dir: Path) -> list[Path]:
    """``tune_load.png`` for the first report with a ``load`` tune section, if any."""
    for item in items:
        section = (item.report.tune or {}).get("load")
        data = load_plot_data(section) if isinstance(section, Mapping) else None
        if data is not None:
            return [write_load_plot(data, out_dir / LOAD_PNG, title=item.label)]
    return []


def write_load_plot(data: LoadPlotData, path: Path, *, title: str = "") -> Path:
    use_file_backend()
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1.6, 1]}
    )
    for k in sorted({*data.predicted, *data.measured}):
        name = "k=0 (off)" if k == 0 else f"k={k}"
        line = data.predicted.get(k, [])
        colour = None
        if line:
            (drawn,) = left.plot(
                [x for x, _ in line], [y for _, y in line], linestyle="--", alpha=0.8, label=name
            )
            colour = drawn.get_color()
        shown = data.measured.get(k, [])
        left.scatter(
            [x for x, _ in shown],
            [y for _, y in shown],
            color=colour,
            s=30,
            label=None if line else name,
        )
    if data.schedule:
        how = "measured" if data.schedule_measured else "k*(level)"
        left.plot(
            [x for x, _ in data.schedule],
            [y for _, y in data.schedule],
            color="black",
            linewidth=2.4,
            marker="s",
            label=f"schedule ({how})",
        )
    _stops_paying(left, data)
    _axis(left, data.levels, "concurrency (requests in flight)")
    left.set_ylabel("aggregate output tokens/s")
    left.set_ylim(bottom=0)
    left.set_title(title or "Throughput per k under load (dashed: model, dots: measured)")
    left.legend(fontsize=8)
    _ranges(right, data)
    if data.verdict:
        fig.suptitle("\n".join(textwrap.wrap(data.verdict, 150)), fontsize=8)
    return save_figure(fig, path)


def _schedule_series(
    section: Mapping[str, Any], k_by_level: dict[int, int]
) -> list[tuple[int, float]]:
    verify = section.get("verify") or []
    if verify:
        return sorted((int(run["level"]), float(run["output_tok_s"])) for run in verify)
    scores = {
        (int(row["level"]), int(row["k"])): float(row["tok_s"])
        for row in section.get("predictions") or []
        if row.get("tok_s") is not None
    }
    return sorted(
        (level, scores[(level, k)]) for level, k in k_by_level.items() if (level, k) in scores
    )


def _stops_paying(ax: Axes, data: LoadPlotData) -> None:
    """Shade the levels from which speculation off wins, from halfway (on the doubling ladder)
    between the last level that still speculates and the first that does not."""
    start = data.stops_paying_at
    if start is None:
        return
    below = [level for level in data.levels if level < start]
    edge = (below[-1] * start) ** 0.5 if below else start * 0.85
    ax.axvspan(
        edge,
        data.levels[-1] * 1.15,
        color="grey",
        alpha=0.15,
        label=f"speculation stops paying (k=0 wins from c={start})",
    )


def _ranges(ax: Axes, data: LoadPlotData) -> None:
    if data.ranges:
        xs: list[float] = []
        ys: list[int] = []
        for start, end, k in data.ranges:
            xs += [start, end + 1]
            ys += [k, k]
        ax.plot(xs, ys, color="black", linewidth=2)
        for start, end, k in data.ranges:
            ax.annotate(
                f"k={k}" if k else "off",
                ((start * (end + 1)) ** 0.5, k),
                fontsize=8,
                ha="center",
                va="bottom",
            )
        ax.set_xscale("log", base=2)
        ax.set_xlim(1, data.ranges[-1][1] + 1)
        ticks = sorted({1, *(start for start, _, _ in data.ranges), data.ranges[-1][1]})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(tick) for tick in ticks], fontsize=8)
        ax.minorticks_off()
    chosen = sorted(data.k_by_level.items())
    ax.scatter(
        [x for x, _ in chosen], [k for _, k in chosen], color="tab:red", zorder=3, label="k*(level)"
    )
    ax.set_xlabel("running batch size")
    ax.set_ylabel("num_speculative_tokens")
    ax.set_ylim(bottom=-0.5)
    ax.grid(alpha=0.3)
    ax.set_title("Schedule: k per batch size")
    ax.legend(fontsize=8)


def _axis(ax: Axes, levels: list[int], label: str) -> None:
    if len(levels) > 2 and levels[-1] / levels[0] >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels)
    ax.set_xticklabels([str(level) for level in levels])
    ax.minorticks_off()
    ax.set_xlabel(label)
    ax.grid(alpha=0.3)
