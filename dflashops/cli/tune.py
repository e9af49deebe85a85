"""``dflashops tune``: recommend num_speculative_tokens from measurements (offline, no server),
or, given a container NAME, by launching and benchmarking it at the k the planner picks (live)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dflashops.cli.context import AppContext, dump_json
from dflashops.cli.roofline_options import roofline_options

if TYPE_CHECKING:
    from pydantic import ValidationError

    from dflashops.roofline.model import RooflineSpec
    from dflashops.roofline.request import RooflineRequest
    from dflashops.tune.live import LiveTuneReport
    from dflashops.tune.runs import TuneRun

K_RANGE = click.IntRange(1, 64)
# options a TuneInputError's ``field`` may name; anything else becomes a plain usage error
OPTION_FIELDS = {
    "acceptance",
    "step-cost",
    "throughput",
    "from",
    "drafted-per-draft",
    "draft-fraction",
    "gpu",
    "weights",
    "active-params",
    "extra-bytes",
}


@click.command(
    "tune",
    epilog="""\b
Model (stated again in every result):
  - R_i is vLLM's per-position acceptance rate, accepted at position i / drafts:
    the UNCONDITIONAL probability that draft positions 0..i were all accepted.
    Tokens per verify step with k drafts = 1 + R_0 + ... + R_{k-1}.
    --conditional converts P(i accepted | 0..i-1 accepted) first.
  - R_i does not depend on k; runs at several k are merged position by position.
  - Past the measured positions R_i decays geometrically (ratio = the smaller of
    the last conditional rate and the decay fitted to the last 3 positions), or
    is 0 with --extrapolate zero.
  - A verify step's time depends on the draft tokens it checks, x = k unless the
    drafter proposes fewer (n-gram): --drafted-per-draft D (at k = number of R
    values) means a share D/k of drafts is full length, the rest empty;
    --draft-fraction Q0,Q1,... gives the share of drafts proposing position i.
    t(x) is fitted by least squares, t = a + b*x. --fit auto replaces the line
    when it misses a point: by >2% with 4+ k, a convex quadratic if that fits
    within 5%; by >5% with 3+ k, monotone interpolation.
  - Throughput is single-stream decode: tokens per step / step time. k* is the
    argmax; --tolerance T lets the smallest k within T of the best win.

\b
--from FILE: a `dflashops bench` report (one run: its k, and from its
  concurrency-1 level 1000/mean TPOT, per-position acceptance, drafts), or
  JSON runs: {"runs": [{"k": 15, "output_tok_s": 40.0,
  "acceptance": [0.80, 0.53, ...]}, {"k": 6, "step_time_s": 0.047,
  "acceptance_length": 2.9, "drafted_per_draft": 6, "num_drafts": 1200}]}

\b
Roofline (--gpu or --bandwidth-gbps, with --weights): ceiling tok/s =
  bandwidth x tp / bytes per step x tokens per step; a measurement above it is
  flagged as a likely measurement error.

\b
Live (NAME): the playbook's server is launched at the current k, a small k,
  the predicted optimum and its better neighbour (at most --budget launches),
  each benched at concurrency 1; then k* is launched (unless it was the last)
  and benched once more: predicted vs measured tok/s and the gain over the
  starting k. k* is written into the playbook's `num_speculative_tokens:` line
  (comments kept; --dry-run only prints the change). The verify bench is saved
  with a `tune` section (--out, default ./tune-NAME-<UTC time>.json).

\b
Examples:
  dflashops tune lab-ct1 -p playbooks/lab-decay.yaml --k-min 1 --k-max 6
  dflashops tune --acceptance 0.80,0.574,0.40,0.236,0.1,0.05,0.02 \\
      --step-cost 1:0.020,2:0.022,4:0.026,8:0.034,15:0.048
  dflashops tune --from runs.json --gpu "RTX A6000" --tp 2 --weights /models/t
""",
)
@click.argument("name", required=False)
@click.option(
    "-p",
    "--playbook",
    "playbook_name",
    help="Live: playbook NAME or FILE. Default: the one playbook naming the container.",
)
@click.option(
    "--budget",
    type=click.IntRange(2, 64),
    help="Live: launches the search may spend (the verify launch not counted). "
    "Default: the playbook's tune.budget.",
)
@click.option(
    "-n", "--requests", type=click.IntRange(min=1), help="Live: requests per bench (concurrency 1)."
)
@click.option("--dry-run", is_flag=True, help="Live: print the playbook change, do not write it.")
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path), help="Live: result JSON file."
)
@click.option("--acceptance", metavar="R0,R1,…", help="Per-position acceptance rates (0..1).")
@click.option(
    "--conditional", is_flag=True, help="--acceptance holds conditional rates, not vLLM's."
)
@click.option(
    "--step-cost",
    "step_costs",
    multiple=True,
    metavar="K:SECONDS",
    help="Seconds per verify step at k (e.g. 4:0.026 or 4:26ms); comma lists, repeatable.",
)
@click.option(
    "--throughput",
    "throughputs",
    multiple=True,
    metavar="K:TOK_S",
    help="Measured single-stream output tok/s at k; comma lists, repeatable.",
)
@click.option(
    "--from",
    "sources",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A bench report or a JSON file of runs (below); repeatable.",
)
@click.option(
    "--drafted-per-draft",
    type=click.FloatRange(min=0),
    help="Mean draft tokens proposed per draft, measured with --acceptance.",
)
@click.option("--draft-fraction", metavar="Q0,Q1,…", help="Share of drafts proposing position i.")
@click.option("--k-min", type=K_RANGE, help="Smallest k [1; live: the playbook's tune.k_min].")
@click.option("--k-max", type=K_RANGE, help="Largest k [15; live: the playbook's tune.k_max].")
@click.option(
    "--tolerance",
    type=click.FloatRange(0, 1, max_open=True),
    default=0.0,
    show_default=True,
    help="Relative: the smallest k within it of the best wins.",
)
@click.option(
    "--extrapolate",
    type=click.Choice(["geometric", "zero"]),
    default="geometric",
    show_default=True,
    help="Acceptance past the measured positions.",
)
@click.option(
    "--fit",
    type=click.Choice(["auto", "linear", "quadratic", "monotone"]),
    default="auto",
    show_default=True,
    help="Step-time model.",
)
@roofline_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@click.pass_context
def tune(
    ctx: click.Context,
    *,
    name: str | None,
    playbook_name: str | None,
    budget: int | None,
    requests: int | None,
    dry_run: bool,
    out: Path | None,
    acceptance: str | None,
    conditional: bool,
    step_costs: tuple[str, ...],
    throughputs: tuple[str, ...],
    sources: tuple[Path, ...],
    drafted_per_draft: float | None,
    draft_fraction: str | None,
    k_min: int | None,
    k_max: int | None,
    tolerance: float,
    extrapolate: str,
    fit: str,
    roofline: RooflineRequest,
    as_json: bool,
) -> None:
    """Recommend num_speculative_tokens (k) from measured acceptance and step times.

    Offline: no server. Give per-position acceptance (--acceptance, or runs in
    --from) and step times at two or more k (--step-cost, --throughput or runs in
    --from); prints the predicted throughput per k and the best k. An explicit
    --acceptance replaces the acceptance merged from --from runs.

    Live: with a container NAME, measure by launching and benchmarking (below).
    """
    from pydantic import ValidationError

    live_only = {
        "-p": playbook_name,
        "--budget": budget,
        "--requests": requests,
        "--dry-run": dry_run or None,
        "--out": out,
    }
    if name is not None:
        offline = {
            "--acceptance": acceptance,
            "--step-cost": step_costs or None,
            "--throughput": throughputs or None,
            "--from": sources or None,
            "--gpu": roofline.gpu,
            "--bandwidth-gbps": roofline.bandwidth_gbps,
        }
        given = [option for option, value in offline.items() if value is not None]
        if given:
            raise click.UsageError(f"{given[0]} is for offline tuning; live NAME measures itself")
        _live(
            ctx.find_object(AppContext) or AppContext(),
            name=name,
            playbook_name=playbook_name,
            k_min=k_min,
            k_max=k_max,
            budget=budget,
            requests=requests,
            dry_run=dry_run,
            out=out,
            as_json=as_json,
        )
        return
    for option, value in live_only.items():
        if value is not None:
            raise click.UsageError(f"{option} is for live tuning: give a container NAME")

    from dflashops.errors import TuneInputError
    from dflashops.tune.acceptance import Extrapolation, acceptance_curve
    from dflashops.tune.model import TuneInputs, TuneSettings, analyse
    from dflashops.tune.source import load_runs
    from dflashops.tune.stepcost import FitMethod

    if acceptance is None:
        for option, flagged in (
            ("--conditional", conditional),
            ("--drafted-per-draft", drafted_per_draft is not None),
            ("--draft-fraction", draft_fraction is not None),
        ):
            if flagged:
                raise click.UsageError(f"{option} describes --acceptance; give --acceptance too")
    if not (acceptance or sources):
        raise click.UsageError("give --acceptance R0,R1,… or --from FILE")
    try:
        settings = TuneSettings(
            k_min=k_min or 1,
            k_max=k_max or 15,
            tolerance=tolerance,
            extrapolation=Extrapolation(extrapolate),
            fit=FitMethod(fit),
        )
        runs: list[TuneRun] = []
        for source in sources:
            runs.extend(load_runs(source))
        runs.extend(_timed_runs(step_costs, throughputs))
        curve = None
        if acceptance is not None:
            curve = acceptance_curve(
                _floats(acceptance, "--acceptance"),
                conditional=conditional,
                draft_fraction=None
                if draft_fraction is None
                else _floats(draft_fraction, "--draft-fraction"),
                drafted_per_draft=drafted_per_draft,
                extrapolation=settings.extrapolation,
            )
        spec = _roofline_spec(roofline)
        result = analyse(
            TuneInputs(runs=tuple(runs), acceptance=curve, settings=settings, roofline=spec)
        )
    except TuneInputError as exc:
        if exc.field in OPTION_FIELDS:
            raise click.BadParameter(exc.one_line(), param_hint=f"'--{exc.field}'") from exc
        raise click.UsageError(exc.one_line()) from exc
    except ValidationError as exc:
        raise click.UsageError(_validation_line(exc)) from exc

    if as_json:
        click.echo(dump_json(result.model_dump(mode="json")))
        return
    from rich.console import Console

    from dflashops.tune.view import result_renderables

    console = Console()
    for renderable in result_renderables(result):
        console.print(renderable)


def _live(
    app: AppContext,
    *,
    name: str,
    playbook_name: str | None,
    k_min: int | None,
    k_max: int | None,
    budget: int | None,
    requests: int | None,
    dry_run: bool,
    out: Path | None,
    as_json: bool,
) -> None:
    from datetime import UTC, datetime

    from dflashops.cli.progress import spinner
    from dflashops.deployment.playbooks import playbook_for_container
    from dflashops.tune.live import LiveTuneJob, live_tune

    path = playbook_for_container(name, playbook_name)
    destination = out or Path(f"tune-{name}-{datetime.now(UTC):%Y%m%d-%H%M%S}.json")
    job = LiveTuneJob(
        container=name,
        playbook_path=path,
        k_min=k_min,
        k_max=k_max,
        budget=budget,
        requests=requests,
        workdir=destination.parent,
    )
    with spinner(f"tune {name}", enabled=not as_json) as say:

        def tell(message: str) -> None:
            say(message)
            if not as_json and message.startswith(("probe ", "k*=")):
                click.echo(message, err=True)

        result = live_tune(app.inventory(), job, say=tell, write=not dry_run)
    saved = result.report.save(destination)
    if as_json:
        click.echo(dump_json(_live_json(result, path, saved, dry_run)))
        return
    _show_live(result, path, saved, dry_run)


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
    from rich.console import Console

    from dflashops.tune.view import result_renderables

    console = Console()
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


def _floats(text: str, option: str) -> list[float]:
    values: list[float] = []
    for part in _items([text]):
        try:
            values.append(float(part))
        except ValueError:
            raise click.BadParameter(
                f"{part!r} is not a number", param_hint=f"'{option}'"
            ) from None
    if not values:
        raise click.BadParameter("no values", param_hint=f"'{option}'")
    return values


def _items(values: tuple[str, ...] | list[str]) -> list[str]:
    return [part for value in values for part in re.split(r"[,\s]+", value.strip()) if part]


def _pairs(values: tuple[str, ...], option: str) -> list[tuple[int, str]]:
    pairs: list[tuple[int, str]] = []
    for item in _items(values):
        k_text, sep, value = item.partition(":")
        if not sep or not k_text.isdigit() or int(k_text) < 1 or not value:
            raise click.BadParameter(
                f"{item!r} is not K:VALUE with K ≥ 1", param_hint=f"'{option}'"
            )
        pairs.append((int(k_text), value))
    return pairs


def _seconds(text: str) -> float:
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(ms|s)?", text.strip())
    if match is None or float(match.group(1)) <= 0:
        raise click.BadParameter(
            f"{text!r} is not a positive duration (0.026, 0.026s or 26ms)",
            param_hint="'--step-cost'",
        )
    value = float(match.group(1))
    return value / 1000 if match.group(2) == "ms" else value


def _positive(text: str, option: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise click.BadParameter(f"{text!r} is not a positive number", param_hint=f"'{option}'")
    return value


def _timed_runs(step_costs: tuple[str, ...], throughputs: tuple[str, ...]) -> list[TuneRun]:
    from dflashops.tune.runs import TuneRun

    runs = [
        TuneRun(k=k, step_time_s=_seconds(value), label=f"--step-cost {k}:{value}")
        for k, value in _pairs(step_costs, "--step-cost")
    ]
    runs.extend(
        TuneRun(k=k, output_tok_s=_positive(value, "--throughput"), label=f"--throughput {k}")
        for k, value in _pairs(throughputs, "--throughput")
    )
    return runs


def _roofline_spec(request: RooflineRequest) -> RooflineSpec | None:
    from dflashops.roofline.request import roofline_spec

    if not request.names_hardware:
        stray = request.stray_options()
        if stray:
            hint = "give --gpu or --bandwidth-gbps"
            raise click.UsageError(f"{stray[0]} is for the roofline: {hint}")
        return None
    if request.weights is None:
        raise click.UsageError("the roofline needs --weights PATH|SIZE")
    return roofline_spec(request)


def _validation_line(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message
