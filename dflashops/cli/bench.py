"""``dflashops bench``: run a streaming benchmark against a server and save the result."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dflashops.cli.context import dump_json

if TYPE_CHECKING:
    from dflashops.bench.client import Endpoint
    from dflashops.bench.models import BenchReport, RequestRecord, ResolvedConfig
    from dflashops.bench.runner import BenchSettings


def _levels(value: str) -> tuple[int, ...]:
    try:
        levels = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected numbers like 1,4,16") from None
    if not levels or any(c < 1 for c in levels):
        raise click.BadParameter(f"{value!r}: levels must be >= 1")
    return levels


@click.command("bench", short_help="Benchmark a running server; save the result JSON.")
@click.argument("name", required=False)
@click.option("--url", help="Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine).")
@click.option("--model", help="Served model name. Default: the first one /v1/models lists.")
@click.option(
    "--api", type=click.Choice(["chat", "completions"]), default="chat", show_default=True
)
@click.option(
    "-w",
    "--workload",
    default="smoke",
    show_default=True,
    help="Built-in (smoke, mixed) or a JSONL file of {prompt|messages, id?, max_tokens?}.",
)
@click.option("-c", "--concurrency", default="1", show_default=True, help="Levels, e.g. 1,4,16.")
@click.option("-n", "--requests", type=click.IntRange(min=1), help="Requests per level.")
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Warm-up requests before each level (not recorded).",
)
@click.option("--max-tokens", type=click.IntRange(min=1), help="Default: the workload's (2000).")
@click.option("--temperature", type=click.FloatRange(min=0.0), help="Default: the workload's (0).")
@click.option("--ignore-eos", is_flag=True, default=None, help="Always generate max_tokens.")
@click.option("--method", help='Recorded speculative method ("none" when off).')
@click.option("-k", "--num-speculative-tokens", "k", type=click.IntRange(min=0), help="Recorded k.")
@click.option("--label", help="Name for tables and plots.")
@click.option(
    "--api-key", envvar="DFLASHOPS_API_KEY", help="Bearer token, if the server wants one."
)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Result JSON file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def bench(  # Click passes every option by keyword
    *,
    name: str | None,
    url: str | None,
    model: str | None,
    api: str,
    workload: str,
    concurrency: str,
    requests: int | None,
    warmup: int,
    max_tokens: int | None,
    temperature: float | None,
    ignore_eos: bool | None,
    method: str | None,
    k: int | None,
    label: str | None,
    api_key: str | None,
    out: Path | None,
    as_json: bool,
) -> None:
    """Benchmark a running server: per concurrency level, a warm-up, then the measured
    requests (streamed; TTFT, ITL, TPOT; tokens from the server's usage) and the server's
    spec-decode counters over the level. The result is saved (--out, default
    ./bench-<UTC time>.json) for `dflashops report`."""
    from dflashops.bench.client import Endpoint
    from dflashops.bench.models import ResolvedConfig
    from dflashops.bench.runner import BenchSettings, run_benchmark_sync
    from dflashops.bench.workload import load_workload
    from dflashops.errors import BenchmarkError

    if url is None:
        detail = f"`bench {name}` needs the launched server's address" if name else "no server"
        raise click.UsageError(f"{detail}: pass --url URL")
    settings = BenchSettings(
        workload=load_workload(workload),
        concurrency=_levels(concurrency),
        requests=requests,
        warmup_requests=warmup,
        max_tokens=max_tokens,
        temperature=temperature,
        ignore_eos=ignore_eos,
        label=label,
    )
    endpoint = Endpoint(url, model=model, api="chat" if api == "chat" else "completions")
    config = ResolvedConfig(container=name, method=method, num_speculative_tokens=k)
    if as_json:
        report = run_benchmark_sync(endpoint, settings, config)
    else:
        report = _run_with_progress(endpoint, settings, config)
    path = report.save(out or Path(f"bench-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"))
    _show(report, path, as_json)
    empty = [lv for lv in report.levels if lv.completed == 0]
    if empty:
        raise BenchmarkError(
            f"every request failed at concurrency {empty[0].max_concurrency}: "
            f"{empty[0].errors[0] if empty[0].errors else 'no reply'}",
            hint=f"the partial result is in {path}",
        )


def _run_with_progress(
    endpoint: Endpoint, settings: BenchSettings, config: ResolvedConfig
) -> BenchReport:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TimeElapsedColumn

    from dflashops.bench.runner import run_benchmark_sync

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    ) as bar:

        class Shown:
            task: TaskID | None = None

            def start_level(self, concurrency: int, requests: int) -> None:
                self.task = bar.add_task(f"concurrency {concurrency}", total=requests)

            def request_done(self, record: RequestRecord) -> None:
                if self.task is not None:
                    bar.advance(self.task)

        return run_benchmark_sync(endpoint, settings, config, progress=Shown())


def _show(report: BenchReport, path: Path, as_json: bool) -> None:
    from dflashops.report.bench_view import LabelledReport, report_document

    item = LabelledReport(label=report.display_label(), path=str(path), report=report)
    if as_json:
        click.echo(dump_json(report_document([item])))
        return
    from rich.console import Console

    from dflashops.report.bench_view import has_spec, level_errors, levels_table, spec_table

    console = Console()
    console.print(levels_table(item))
    if has_spec(item):
        console.print(spec_table(item))
    for error in level_errors(item):
        console.print(f"[red]failed requests[/red] {error}")
    console.print(f"saved {path}")
