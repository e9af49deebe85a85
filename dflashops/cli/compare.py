"""``dflashops compare``: the same workload against each engine and speculative method, one
table."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dflashops.cli.context import AppContext, dump_json
from dflashops.cli.options import SafePath, playbook_option, skip_pve_check_option

if TYPE_CHECKING:
    from dflashops.tune.compare import CompareOutcome, EngineChoice

pass_app = click.make_pass_decorator(AppContext)


@click.command(
    "compare", short_help="Launch and bench each engine and speculative method; one table."
)
@click.argument("name")
@playbook_option
@click.option(
    "--methods",
    default="none,dflash,ngram,draft_model",
    show_default=True,
    help="Comma list of none, dflash, mtp, eagle3, ngram, draft_model.",
)
@click.option(
    "--engines",
    help="Comma list of engines to run each method on, e.g. vllm,sglang==0.5.16 (another "
    "engine than the playbook's needs its release). Default: the playbook's engine.",
)
@click.option(
    "--k",
    "engine_k",
    multiple=True,
    metavar="ENGINE=K",
    help="That engine's k (its tuned setting) instead of the playbook's; repeatable.",
)
@click.option("-n", "--requests", type=click.IntRange(min=1), help="Requests per level.")
@click.option("--out", type=SafePath(dir_okay=False, path_type=Path), help="Result JSON file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@skip_pve_check_option
@pass_app
def compare(
    app: AppContext,
    *,
    name: str,
    playbook_name: str | None,
    methods: str,
    engines: str | None,
    engine_k: tuple[str, ...],
    requests: int | None,
    out: Path | None,
    as_json: bool,
) -> None:
    """Launch the playbook on container NAME once per engine and method (the method's
    overrides applied: none turns speculation off, ngram drops the drafter model, the
    playbook's own method runs as written) and bench each with the playbook's workload.

    \b
    --engines vllm,sglang==0.5.16 runs every method on both: the playbook is loaded with
    engine.name/engine.version set, so a base venv written /opt/lab/venv-{engine}-cpu-{version}
    follows. Give each engine its tuned k with --k vllm=5 --k sglang=3.

    What cannot run (another drafter checkpoint, MTP without MTP layers, a method the engine
    release lacks, a launch that failed, a server that died during its bench) is skipped with
    the reason; a warm-up the server refuses (HTTP 4xx) stops the compare at once, as every
    cell would send it again. The server is left running the last one
    measured; relaunch the playbook to restore it. `dflashops report FILE --plots DIR` draws
    compare_methods.png from the saved result."""
    from dflashops.cli.progress import progress_console, spinner
    from dflashops.deployment.playbooks import playbook_for_container
    from dflashops.tune.compare import compare_container

    chosen, on, ks = _choices(methods, engines, engine_k)
    path = playbook_for_container(name, playbook_name)
    # a terminal's spinner is transient: each cell's outcome is echoed to stay on screen (a
    # pipe has them already among the step lines); launch's and bench's own steps are not
    echo = not as_json and progress_console().is_interactive
    cells = {*chosen, *(str(choice) for choice in on)}
    with spinner(f"compare on {name}", enabled=not as_json) as say:

        def tell(message: str) -> None:
            say(message)
            if echo and is_cell_outcome(message, cells):
                click.echo(message, err=True)

        outcome, report = compare_container(
            app.inventory(),
            name,
            path,
            chosen,
            engines=on,
            engine_k=ks,
            requests=requests,
            say=tell,
        )
    saved = None
    if report is not None:
        saved = report.save(out or Path(f"compare-{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}.json"))
    if as_json:
        section = {"container": name, "playbook": str(path), **outcome.section()}
        click.echo(dump_json({**section, "report": None if saved is None else str(saved)}))
    else:
        _show(outcome, saved)
    if report is None:
        raise click.ClickException("no method could be measured")


def is_cell_outcome(message: str, cells: set[str]) -> bool:
    """``dflash: skipped (...)``, ``ngram: launching on sglang 0.5.16``: a line of compare's own
    about one of ``cells`` (a method or an engine), not a step of launch or bench inside it."""
    head, _, rest = message.partition(": ")
    return head in cells and bool(rest) and rest != "benchmarking"


def _choices(
    methods: str, engines: str | None, engine_k: tuple[str, ...]
) -> tuple[list[str], list[EngineChoice], dict[str, int]]:
    """The methods, engines and per-engine k asked for; a usage error names the option."""
    from dflashops.errors import TuneInputError
    from dflashops.tune.compare import parse_engine_k, parse_engines, parse_methods

    try:
        return (
            parse_methods(methods),
            parse_engines(engines) if engines else [],
            parse_engine_k(engine_k),
        )
    except TuneInputError as exc:
        raise click.BadParameter(exc.one_line(), param_hint=f"'--{exc.field}'") from exc


def _show(outcome: CompareOutcome, saved: Path | None) -> None:
    from rich.table import Table

    from dflashops.cli.console import make_console

    table = Table(title="engines and speculative methods, same workload")
    for column in ("engine", "method", "k", "c", "tok/s", "TPOT ms", "accept len", "per-position"):
        table.add_column(
            column, justify="left" if column in ("engine", "method", "per-position") else "right"
        )
    for row in outcome.rows:
        table.add_row(
            row.engine,
            row.method,
            "-" if row.k is None else str(row.k),
            str(row.concurrency),
            f"{row.output_tok_s:.1f}",
            "-" if row.mean_tpot_ms is None else f"{row.mean_tpot_ms:.1f}",
            "-" if row.acceptance_length is None else f"{row.acceptance_length:.2f}",
            "-"
            if not row.per_position_acceptance
            else ", ".join(f"{rate:.2f}" for rate in row.per_position_acceptance),
        )
    console = make_console()
    console.print(table)
    for item in outcome.skipped:
        on = f" on {item.engine}" if item.engine else ""
        console.print(f"skipped {item.method}{on}: {item.reason}", style="yellow")
    if saved is not None:
        console.print(f"saved {saved}")
