"""``dflashops parse-log``: throughput and spec-decode windows from a saved server log."""

from __future__ import annotations

from pathlib import Path

import click

from dflashops.cli.context import dump_json
from dflashops.cli.options import SafePath


@click.command(
    "parse-log", short_help="Throughput and spec-decode windows from a saved server log."
)
@click.argument("file", type=SafePath(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def parse_log(file: Path, as_json: bool) -> None:
    """Read a saved vLLM (V0 0.5+ or V1, any version) or SGLang (0.4+) log and print its
    periodic throughput and spec-decode windows, with totals recomputed from the integer
    Accepted/Drafted counts.

    Lines are found whatever header they carry (none, journald, docker --timestamps, Python
    logging, process tags). The acceptance rate is shown as printed, and in the JSON also as
    draft_acceptance_rate_pct, one definition for every engine and version: draft tokens the
    output kept / draft tokens proposed. A file with none of these lines exits 2."""
    from dflashops.metrics.logs import parse_log_file, require_windows

    summary = require_windows(parse_log_file(file), str(file))
    if as_json:
        import json

        document = json.loads(summary.model_dump_json())  # NaN/inf become null, as JSON wants
        click.echo(dump_json({"file": str(file), **document}))
        return
    from rich.markup import escape

    from dflashops.cli.console import make_console
    from dflashops.report.bench_log_view import log_notes, spec_decode_table, throughput_table

    console = make_console()
    if summary.engine_version:
        console.print(f"{file}: engine version {summary.engine_version}")
    if summary.throughput_windows:
        console.print(throughput_table(summary))
    if summary.spec_decode_windows:
        console.print(spec_decode_table(summary))
    for note in [*log_notes(summary), *summary.notes]:
        console.print(f"[dim]{escape(note)}[/dim]")
