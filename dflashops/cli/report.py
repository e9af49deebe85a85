"""``dflashops report``: render one saved benchmark, or compare several, with PNG plots."""

from __future__ import annotations

from pathlib import Path

import click

from dflashops.cli.context import dump_json
from dflashops.cli.options import SafePath


@click.command(
    "report", short_help="Render a saved benchmark, or compare several (tables, PNG plots)."
)
@click.argument("files", nargs=-1, type=SafePath(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--plots",
    "plots_dir",
    type=SafePath(file_okay=False, path_type=Path),
    help="Write PNG plots (per-position acceptance; tok/s and TPOT by concurrency) here.",
)
@click.option(
    "--loss",
    "loss_file",
    type=SafePath(exists=True, dir_okay=False, path_type=Path),
    help="A drafter training run's metrics.jsonl: draw its loss curve into --plots.",
)
@click.option(
    "--requests", "with_requests", is_flag=True, help="Keep per-request records in --json."
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def report(
    files: tuple[Path, ...],
    plots_dir: Path | None,
    loss_file: Path | None,
    with_requests: bool,
    as_json: bool,
) -> None:
    """Render FILE (a result of `dflashops bench --out`); with several FILEs, compare them
    level by level against the first. Before/after a new drafter, per position:

    \b
      dflashops report old.json new.json --plots plots/
      dflashops report --loss run/metrics.jsonl --plots plots/   # training loss curve
    """
    from dflashops.bench.models import BenchReport
    from dflashops.report.bench_view import label_reports, report_document

    if not files and loss_file is None:
        raise click.UsageError("give a bench result FILE, or --loss with --plots")
    if loss_file is not None and plots_dir is None:
        raise click.UsageError("--loss draws a PNG: say where with --plots DIR")
    items = label_reports([(path, BenchReport.load(path)) for path in files])
    plots: list[Path] = []
    if plots_dir is not None:
        from dflashops.report.plots import write_plots
        from dflashops.report.training_plots import write_loss_curve

        plots = write_plots(items, plots_dir) if items else []
        if loss_file is not None:
            plots.append(write_loss_curve(loss_file, plots_dir))
    if as_json:
        click.echo(dump_json(report_document(items, plots, with_requests)))
        return
    from dflashops.cli.console import make_console
    from dflashops.report.bench_view import bench_renderables, comparison_rows, comparison_table

    console = make_console()
    for item in items:
        for renderable in bench_renderables(item, with_config=True):
            console.print(renderable)
    if len(items) > 1:
        console.print(comparison_table(comparison_rows(items)))
    for path in plots:
        console.print(f"wrote {path}")
