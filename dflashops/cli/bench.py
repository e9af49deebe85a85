"""``dflashops bench``: run a streaming benchmark against a server and save the result."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dflashops.cli.context import AppContext, dump_json
from dflashops.cli.options import FiniteFloatRange, SafePath, playbook_option, skip_pve_check_option
from dflashops.cli.progress import MAIN, StepLines, live_progress, progress_console, step_lines
from dflashops.cli.roofline_options import roofline_options

if TYPE_CHECKING:
    import rich.progress

    from dflashops.bench.models import BenchReport, RequestRecord
    from dflashops.bench.progress import Progress
    from dflashops.roofline.request import RooflineRequest

pass_app = click.make_pass_decorator(AppContext)
# bench.entry.URL_API_KEY_ENV, spelled out: importing it here would load pydantic on --help
URL_API_KEY_ENV = "DFLASHOPS_API_KEY"


def _levels(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        levels = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected numbers like 1,4,16") from None
    if not levels or any(c < 1 for c in levels):
        raise click.BadParameter(f"{value!r}: levels must be >= 1")
    return levels


@click.command("bench", short_help="Benchmark a container's server (or a URL); save the JSON.")
@click.argument("name", required=False)
@click.option("--url", help="Server root, e.g. http://127.0.0.1:8000 (a trailing /v1 is fine).")
@playbook_option
@click.option(
    "--model", help="--url: the served model name. Default: the playbook's, else the first listed."
)
@click.option(
    "--api",
    type=click.Choice(["chat", "completions"]),
    help="The OpenAI API the requests use; completions for a model without a chat template. "
    "Default: the playbook's bench.api, else chat.",
)
@click.option(
    "-w",
    "--workload",
    help="Built-in (smoke, mixed) or a JSONL file of {prompt|messages, id?, max_tokens?}. "
    "Default: the playbook's, else smoke (the reference request).",
)
@click.option("-c", "--concurrency", help="Levels, e.g. 1,4,16. Default: the playbook's, else 1.")
@click.option("-n", "--requests", type=click.IntRange(min=1), help="Requests per level.")
@click.option(
    "--warmup",
    type=click.IntRange(min=0),
    help="Warm-up requests before each level (not recorded). Default: the playbook's, else 1.",
)
@click.option(
    "--max-tokens", type=click.IntRange(min=1), help="Default: the playbook's, else 2000."
)
@click.option("--temperature", type=FiniteFloatRange(min=0.0), help="Default: 0.")
@click.option(
    "--ignore-eos/--no-ignore-eos", default=None, help="Always generate max_tokens tokens."
)
@click.option(
    "--thinking/--no-thinking",
    default=None,
    help="chat_template_kwargs.enable_thinking (templates without it ignore it).",
)
@click.option("--method", help='Recorded speculative method ("none" when off).')
@click.option("-k", "--num-speculative-tokens", "k", type=click.IntRange(min=0), help="Recorded k.")
@click.option("--label", help="Name for tables and plots.")
@click.option(
    "--api-key-env",
    metavar="VAR",
    help=f"With --url: the variable holding the bearer token (default {URL_API_KEY_ENV}). "
    "For NAME the playbook's server.api_key_env names it. Keys never go on the command line.",
)
@click.option(
    "--server-log",
    metavar="PATH",
    help="NAME: the server log inside the container (default /var/log/dflashops/server.log).",
)
@roofline_options
@click.option(
    "--no-roofline",
    is_flag=True,
    help="NAME: skip the roofline (it asks the container's nvidia-smi and sizes its weights).",
)
@click.option("--out", type=SafePath(dir_okay=False, path_type=Path), help="Result JSON file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@skip_pve_check_option
@pass_app
def bench(  # Click passes every option by keyword
    app: AppContext,
    *,
    name: str | None,
    url: str | None,
    playbook_name: str | None,
    model: str | None,
    api: str | None,
    workload: str | None,
    concurrency: str | None,
    requests: int | None,
    warmup: int | None,
    max_tokens: int | None,
    temperature: float | None,
    ignore_eos: bool | None,
    thinking: bool | None,
    method: str | None,
    k: int | None,
    label: str | None,
    api_key_env: str | None,
    server_log: str | None,
    roofline: RooflineRequest,
    no_roofline: bool,
    out: Path | None,
    as_json: bool,
) -> None:
    """Benchmark a running server: per concurrency level, a warm-up, then the measured
    requests (streamed; TTFT, ITL, TPOT; tokens from the server's usage), the server's
    spec-decode and generation counters over the level and, for a container NAME, the server
    log's own spec-decode lines of the same window (read over SSH), cross-checked against the
    counters. NAME's address, port, model and API key variable come from the inventory, the
    playbook and the container's /etc/dflashops/deployed.json. The result is saved (--out,
    default ./bench-<UTC time>.json) for `dflashops report`.

    Roofline: with NAME on a GPU server, the GPU (nvidia-smi), tensor-parallel degree and the
    target's safetensors sizes give the single-stream decode ceiling, bandwidth x tp / bytes
    per step x acceptance length, and the share of it concurrency 1 reached (1000 / mean
    TPOT); a rate above it is flagged as a likely measurement error. --gpu, --bandwidth-gbps,
    --tp and --weights override what was found; with --url give them all."""
    from pydantic import ValidationError

    from dflashops.bench.entry import nothing_completed, run_bench
    from dflashops.bench.request import BenchRequest, RecordedLabels, SettingsRequest
    from dflashops.bench.stopped import BenchInterrupted
    from dflashops.pydantic_errors import first_error_line

    try:
        request = BenchRequest(
            container=name,
            url=url,
            playbook=playbook_name,
            model=model,
            api=None if api is None else ("chat" if api == "chat" else "completions"),
            settings=SettingsRequest(
                workload=workload,
                concurrency=_levels(concurrency),
                requests=requests,
                warmup_requests=warmup,
                max_tokens=max_tokens,
                temperature=temperature,
                ignore_eos=ignore_eos,
                thinking=thinking,
                label=label,
            ),
            labels=RecordedLabels(method=method, num_speculative_tokens=k),
            api_key_env=api_key_env,
            server_log=server_log,
            roofline=roofline,
            no_roofline=no_roofline,
        )
    except ValidationError as exc:
        raise click.UsageError(first_error_line(exc)) from exc
    stopped = None
    with bench_progress(enabled=not as_json) as progress:
        try:
            report = run_bench(request, app.inventory, progress=progress)
        except BenchInterrupted as stop:  # what was measured is saved and shown all the same
            report, stopped = stop.report, stop
    path = report.save(out or Path(f"bench-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"))
    _show(report, path, as_json)
    failure = nothing_completed(report, path) if stopped is None else stopped.saved(path)
    if failure is not None:
        raise failure


@contextmanager
def bench_progress(*, enabled: bool = True) -> Iterator[Progress]:
    """Per level requests done / total and output tok/s so far, plus what the run waits for
    between levels: bars on a terminal, step lines elsewhere (``dflashops.cli.progress``)."""
    from dflashops.bench.progress import QuietProgress

    if not enabled:
        yield QuietProgress()
        return
    console = progress_console()
    if not console.is_interactive:
        with step_lines("bench", console) as lines:
            yield _BenchLines(lines)
        return
    with live_progress(console, bars=True) as bar:
        shown = _Shown(bar)
        try:
            yield shown
        finally:
            shown.done()


class _Shown:
    """Feeds the runner's callbacks into the live display's bars."""

    def __init__(self, bar: rich.progress.Progress) -> None:
        self.bar = bar
        self.status = bar.add_task("starting", total=None, count="", rate="")
        self.level: rich.progress.TaskID | None = None
        self.tokens = 0
        self.started = 0.0

    def phase(self, message: str) -> None:
        self.bar.update(self.status, description=message, visible=True)

    def start_level(self, concurrency: int, requests: int) -> None:
        self.bar.update(self.status, visible=False)
        self.level = self.bar.add_task(
            f"concurrency {concurrency}", total=requests, count=f"0/{requests}", rate=""
        )
        self.tokens = 0
        self.started = time.perf_counter()

    def request_done(self, record: RequestRecord) -> None:
        if self.level is None:
            return
        self.tokens += record.output_tokens or 0
        elapsed = time.perf_counter() - self.started
        rate = f"{self.tokens / elapsed:.1f} tok/s" if elapsed > 0 else ""
        self.bar.advance(self.level)
        task = self.bar.tasks[self.level]
        self.bar.update(self.level, count=f"{task.completed:.0f}/{task.total:.0f}", rate=rate)

    def done(self) -> None:
        self.bar.remove_task(self.status)


class _BenchLines:
    """The runner's callbacks as step lines: each phase and each level is a step, and the
    level's request count and rate are its news (its heartbeat and end line say them)."""

    def __init__(self, lines: StepLines) -> None:
        from dflashops.bench.progress import SayProgress

        self.lines = lines
        self.counts = SayProgress(lambda message: lines.update(MAIN, message))

    def phase(self, message: str) -> None:
        self.lines.step(MAIN, message)

    def start_level(self, concurrency: int, requests: int) -> None:
        self.lines.step(MAIN, f"concurrency {concurrency}: {requests} requests")
        self.counts.start_level(concurrency, requests)

    def request_done(self, record: RequestRecord) -> None:
        self.counts.request_done(record)


def _show(report: BenchReport, path: Path, as_json: bool) -> None:
    from dflashops.report.bench_view import LabelledReport, report_document

    item = LabelledReport(label=report.display_label(), path=str(path), report=report)
    if as_json:
        click.echo(dump_json(report_document([item])))
        return
    from dflashops.cli.console import make_console
    from dflashops.report.bench_view import bench_renderables

    console = make_console()
    for renderable in bench_renderables(item, with_config=False):
        console.print(renderable)
    console.print(f"saved {path}")
