"""Rich rendering of a ``TuneResult`` (imported by the CLI only when it prints a table)."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from dflashops.tune.model import TuneResult

LEGEND = (
    "tok/step: tokens per verify step; extrap.: beyond the measurements; "
    "at floor: step time raised to the roofline's"
)


def result_renderables(result: TuneResult) -> list[RenderableType]:
    """Headline, predictions per k, step-time fit, roofline, warnings and assumptions."""
    # the legend is a line of its own, not the table's caption: a caption wraps at the table's
    # width, a line only at the console's
    legend = Text(LEGEND, style="dim")
    out: list[RenderableType] = [_headline(result), _predictions(result), legend, _fit(result)]
    if result.roofline is not None:
        roof = result.roofline
        line = (
            f"roofline: {roof.bandwidth_gbps:g} GB/s × tp {roof.tp} / "
            f"{roof.bytes_per_step / 1e9:.2f} GB per step = {roof.ceiling_tok_s_at_al1:.1f} tok/s "
            f"without speculation, {roof.ceiling_tok_s:.1f} tok/s at k*'s acceptance length "
            f"{roof.acceptance_length:.2f} ({roof.bandwidth_source})"
        )
        if roof.fraction_of_ceiling is not None:
            line += f"; measured at k* reaches {roof.fraction_of_ceiling:.0%} of it"
        out.append(Text(line))
    for warning in result.warnings:
        out.append(Text(f"warning: {warning}", style="yellow"))
    out.append(Text("assumptions:", style="dim"))
    for assumption in result.assumptions:
        out.append(Text(f"  - {assumption}", style="dim"))
    return out


def _headline(result: TuneResult) -> Text:
    best = result.prediction(result.best_k)
    text = Text()
    text.append(f"k* = {result.best_k}", style="bold green")
    text.append(
        f": {best.throughput_tok_s:.1f} tok/s predicted "
        f"({best.tokens_per_step:.2f} tokens per step, {best.step_time_s * 1e3:.2f} ms per step)"
    )
    if result.best_measured_k is not None:
        measured = result.prediction(result.best_measured_k).measured_tok_s
        if measured is not None:
            text.append(f"; best measured: k={result.best_measured_k} at {measured:.1f} tok/s")
    return text


def _predictions(result: TuneResult) -> Table:
    has_measured = any(row.measured_tok_s is not None for row in result.predictions)
    has_ceiling = any(row.ceiling_tok_s is not None for row in result.predictions)
    table = Table(title="Predicted single-stream tok/s per k")
    for name in ("k", "tok/step", "drafted", "step ms", "tok/s", "vs best"):
        table.add_column(name, justify="right")
    if has_measured:
        table.add_column("measured", justify="right")
    if has_ceiling:
        table.add_column("ceiling", justify="right")
    table.add_column("note")
    for row in result.predictions:
        notes = []
        if row.acceptance_extrapolated:
            notes.append("acc. extrap.")
        if row.cost_extrapolated:
            notes.append("time extrap.")
        if row.at_floor:
            notes.append("at floor")
        cells = [
            f"{row.k}",
            f"{row.tokens_per_step:.3f}",
            f"{row.drafted_tokens:.2f}",
            f"{row.step_time_s * 1e3:.2f}",
            f"{row.throughput_tok_s:.1f}",
            f"{row.relative_to_best:.1%}",
        ]
        if has_measured:
            cells.append("-" if row.measured_tok_s is None else f"{row.measured_tok_s:.1f}")
        if has_ceiling:
            cells.append("-" if row.ceiling_tok_s is None else f"{row.ceiling_tok_s:.1f}")
        cells.append(", ".join(notes))
        table.add_row(*cells, style="bold green" if row.k == result.best_k else None)
    return table


def _fit(result: TuneResult) -> Table:
    fit = result.step_cost
    if fit.kind == "linear":
        title = (
            f"Step-time fit: t = {fit.intercept_s * 1e3:.3f} ms + "
            f"{fit.slope_s_per_token * 1e3:.3f} ms × drafted tokens "
            f"(rmse {fit.rmse_s * 1e3:.3f} ms)"
        )
    elif fit.kind == "quadratic":
        title = (
            f"Step-time fit: t = {fit.intercept_s * 1e3:.3f} ms + "
            f"{fit.slope_s_per_token * 1e3:.3f} ms × x + "
            f"{fit.curvature_s_per_token2 * 1e3:.4f} ms × x² (rmse {fit.rmse_s * 1e3:.3f} ms)"
        )
    else:
        title = f"Step-time fit: monotone interpolation (rmse {fit.rmse_s * 1e3:.3f} ms)"
    table = Table(title=title)
    for name in ("k", "drafted", "measured ms", "fitted ms", "residual"):
        table.add_column(name, justify="right")
    for point in fit.points:
        table.add_row(
            f"{point.k}",
            f"{point.drafted_tokens:.2f}",
            f"{point.seconds * 1e3:.3f}",
            f"{point.fitted_s * 1e3:.3f}",
            f"{point.relative_residual:+.1%}",
        )
    return table
