"""``dflashops tune NAME``: choose num_speculative_tokens on a container by launching and
benchmarking its playbook at the k the planner picks (live). ``tune-offline`` recommends k from
measurements alone; given its options, this command points there."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dflashops.cli.context import AppContext, dump_json
from dflashops.cli.options import SafePath, playbook_option, skip_pve_check_option

if TYPE_CHECKING:
    from dflashops.tune.live import LiveTuneReport

pass_app = click.make_pass_decorator(AppContext)


def _levels(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        levels = tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: concurrency levels such as 1,4,16") from None
    if not levels or any(level < 1 for level in levels):
        raise click.BadParameter(f"{value!r}: concurrency levels are 1 or more")
    return levels


K_RANGE = click.IntRange(1, 64)
OFFLINE_HINT = "to recommend k from measurements, without a server: `dflashops tune-offline`"


class PointsToSibling(click.Command):
    """A command whose "no such option" error names the sibling command that has the option
    (``tune`` ↔ ``tune-offline``), found through the parent group, as the CLI registers it."""

    def __init__(
        self, *args: Any, sibling: str, sibling_usage: str, sibling_mode: str, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.sibling = sibling
        self.sibling_usage = sibling_usage
        self.sibling_mode = sibling_mode

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            if exc.option_name in self._sibling_only(ctx):
                raise click.UsageError(
                    f"{exc.option_name} is for {self.sibling_mode}: "
                    f"`dflashops {self.sibling_usage} {exc.option_name} …`",
                    ctx,
                ) from exc
            raise

    def _sibling_only(self, ctx: click.Context) -> set[str]:
        parent = ctx.parent
        group = parent.command if parent is not None else None
        if parent is None or not isinstance(group, click.Group):
            return set()  # invoked on its own: no sibling to point to
        sibling = group.get_command(parent, self.sibling)
        if sibling is None:
            return set()

        def names(command: click.Command) -> set[str]:
            return {name for param in command.params for name in param.opts}

        return names(sibling) - names(self)


class LiveTuneCommand(PointsToSibling):
    """``tune``: offline options point to ``tune-offline``, and so does a missing NAME."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(
            *args,
            sibling="tune-offline",
            sibling_usage="tune-offline",
            sibling_mode="offline tuning",
            **kwargs,
        )

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.MissingParameter as exc:
            raise click.UsageError(f"missing container NAME; {OFFLINE_HINT}", ctx) from exc


@click.command(
    "tune",
    cls=LiveTuneCommand,
    short_help="Choose num_speculative_tokens on a container: launch, bench, verify.",
    epilog="""\b
How: the playbook's server is launched at its current k, then a small k, the
  predicted optimum and its better neighbour (at most --budget launches), each
  benched at concurrency 1 with the playbook's workload; then k* is launched
  (unless it was the last) and benched once more: predicted vs measured tok/s
  and the gain over the starting k. k* is written into the playbook's
  `num_speculative_tokens:` line (comments kept; --dry-run only prints the
  change). The verify bench is saved with a `tune` section (--out, default
  ./tune-NAME-<UTC time>.json), each probe's bench next to it.

\b
Assumptions:
  - The playbook runs speculative decoding (a method other than none, a k)
    and has one `num_speculative_tokens: N` line; both are checked before the
    first launch.
  - k* is chosen by the model `dflashops tune-offline --help` states:
    per-position acceptance does not depend on k, a verify step's time is
    fitted over the drafted tokens, and throughput is single-stream decode.
  - Nothing else uses the server while it is measured (its counters are
    server-wide). It is left running k*.

\b
Examples:
  dflashops tune lab-ct1
  dflashops tune lab-ct1 -p playbooks/lab-decay.yaml --k-min 1 --k-max 6
  dflashops tune gpu-ct2 --budget 3 -n 4 --dry-run --json
""",
)
@click.argument("name")
@playbook_option
@click.option(
    "--budget",
    type=click.IntRange(2, 64),
    help="Launches the search may spend (the verify launch not counted). "
    "Default: the playbook's tune.budget.",
)
@click.option(
    "-n", "--requests", type=click.IntRange(min=1), help="Requests per bench (concurrency 1)."
)
@click.option("--k-min", type=K_RANGE, help="Smallest k. Default: the playbook's tune.k_min.")
@click.option("--k-max", type=K_RANGE, help="Largest k. Default: the playbook's tune.k_max.")
@click.option(
    "--load",
    "load",
    metavar="C1,C2,…",
    callback=_levels,
    help="Tune k per concurrency level (e.g. 1,2,4,8,16) and serve it as vLLM's batch-size "
    "schedule, verified at every level before it is kept. Default: the playbook's tune.load "
    "(none: one k at concurrency 1).",
)
@click.option(
    "--tpot-slo-ms",
    type=click.FloatRange(min=0, min_open=True),
    help="With --load: the most tok/s whose median TPOT stays under this (ms).",
)
@click.option("--dry-run", is_flag=True, help="Print the playbook change, do not write it.")
@click.option("--out", type=SafePath(dir_okay=False, path_type=Path), help="Result JSON file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@skip_pve_check_option
@pass_app
def tune(  # Click passes every option by keyword
    app: AppContext,
    *,
    name: str,
    playbook_name: str | None,
    budget: int | None,
    requests: int | None,
    k_min: int | None,
    k_max: int | None,
    load: tuple[int, ...] | None,
    tpot_slo_ms: float | None,
    dry_run: bool,
    out: Path | None,
    as_json: bool,
) -> None:
    """Choose num_speculative_tokens (k) for container NAME by measuring it: launch its
    playbook at the k the planner picks, bench each at concurrency 1, verify the best k (k*)
    and write it into the playbook."""
    from pydantic import ValidationError

    from dflashops.cli.progress import spinner
    from dflashops.pydantic_errors import first_error_line
    from dflashops.tune.live import live_tune
    from dflashops.tune.request import LiveTuneRequest

    destination = out or Path(f"tune-{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}.json")
    try:
        request = LiveTuneRequest(
            container=name,
            playbook=playbook_name,
            k_min=k_min,
            k_max=k_max,
            budget=budget,
            requests=requests,
            write_playbook=not dry_run,
            probe_dir=destination.parent,
            load=load,
            tpot_slo_ms=tpot_slo_ms,
        )
    except ValidationError as exc:
        raise click.UsageError(first_error_line(exc)) from exc
    from dflashops.tune.live_load import load_asked

    if load_asked(request):
        from dflashops.cli.tune_load_view import run_load

        run_load(app.inventory(), request, destination, as_json=as_json)
        return
    if tpot_slo_ms is not None:
        raise click.UsageError("--tpot-slo-ms limits a load tune: add --load C1,C2,…")
    with spinner(f"tune {name}", enabled=not as_json) as say:

        def tell(message: str) -> None:
            say(message)
            if not as_json and message.startswith(("probe ", "k*=")):
                click.echo(message, err=True)

        result = live_tune(app.inventory(), request, say=tell)
    saved = result.report.save(destination)
    if as_json:
        click.echo(dump_json(_live_json(result, result.playbook_path, saved, dry_run)))
        return
    _show_live(result, result.playbook_path, saved, dry_run)


def _live_json(result: LiveTuneReport, path: Path, saved: Path, dry_run: bool) -> dict[str, Any]:
    outcome = result.outcome
    return {
        "container": result.report.config.container,
        "best_k": outcome.best_k,
        "start_k": outcome.start_k,
        "predicted_tok_s": outcome.predicted_tok_s,
        "measured_tok_s": outcome.measured_tok_s,
        "start_tok_s": outcome.start_tok_s,
        "gain": outcome.gain,
        "launches": outcome.launches,
        "playbook": str(path),
        "playbook_change": list(result.k_change) if result.k_change else None,
        "written": result.k_change is not None and not dry_run,
        "report": str(saved),
        "bench_files": [str(file) for file in result.bench_files],
        "warnings": list(outcome.result.warnings),
    }


def _show_live(result: LiveTuneReport, path: Path, saved: Path, dry_run: bool) -> None:
    from dflashops.cli.console import make_console
    from dflashops.tune.view import result_renderables

    console = make_console()
    for renderable in result_renderables(result.outcome.result):
        console.print(renderable)
    outcome = result.outcome
    measured = outcome.measured_tok_s
    start = outcome.start_tok_s
    console.print(
        f"k*={outcome.best_k}: predicted {outcome.predicted_tok_s:.1f} tok/s, measured "
        + (f"{measured:.1f} tok/s" if measured is not None else "n/a")
        + f" (launches: {', '.join(map(str, outcome.launches))})"
    )
    if outcome.gain is not None and start is not None:
        console.print(
            f"vs the starting k={outcome.start_k} ({start:.1f} tok/s): {outcome.gain:+.1%}"
        )
    if result.k_change is None:
        console.print(f"{path}: already at k={outcome.best_k}")
    else:
        old, new = result.k_change
        verb = "would change" if dry_run else "changed"
        console.print(f"{path}: {verb}\n  - {old}\n  + {new}")
    console.print(f"saved {saved}")
