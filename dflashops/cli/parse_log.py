"""``dflashops parse-log``: throughput and spec-decode windows from a saved server log."""

from __future__ import annotations

from pathlib import Path

import click

from dflashops.cli.context import dump_json


@click.command(
    "parse-log", short_help="Throughput and spec-decode windows from a saved server log."
)
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def parse_log(file: Path, as_json: bool) -> None:
    """Read a saved vLLM (V0 or V1, any version) or SGLang log and print its periodic
    throughput and spec-decode windows, with totals recomputed from the integer
    Accepted/Drafted counts."""
    from dflashops.errors import ParseError
    from dflashops.metrics.logs import parse_log_file

    summary = parse_log_file(file)
    if not summary.throughput_windows and not summary.spec_decode_windows:
        raise ParseError(
            f"{file}: no throughput or spec-decode lines",
            hint="vLLM logs them every VLLM_LOG_STATS_INTERVAL s while busy, at INFO, unless "
            "--disable-log-stats; SGLang logs 'Decode batch' lines",
        )
    if as_json:
        import json

        document = json.loads(summary.model_dump_json())  # NaN/inf become null, as JSON wants
        click.echo(dump_json({"file": str(file), **document}))
        return
    from dflashops.cli.console import make_console
    from dflashops.report.bench_log_view import log_notes, spec_decode_table, throughput_table

    console = make_console()
    if summary.engine_version:
        console.print(f"{file}: engine version {summary.engine_version}")
    if summary.throughput_windows:
        console.print(throughput_table(summary))
    if summary.spec_decode_windows:
        console.print(spec_decode_table(summary))
    for note in log_notes(summary):
        console.print(f"[dim]{note}[/dim]")
