"""``dflashops tune-offline``: recommend num_speculative_tokens from measurements, no server."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

import click

from dflashops.cli.context import dump_json
from dflashops.cli.options import FiniteFloatRange, SafePath
from dflashops.cli.roofline_options import roofline_options
from dflashops.cli.tune import PointsToSibling

if TYPE_CHECKING:
    from dflashops.roofline.request import RooflineRequest
    from dflashops.tune.runs import TuneRun

K_LIMIT = 64  # tune.runs.K_LIMIT: the largest num_speculative_tokens the tuner models
K_RANGE = click.IntRange(1, K_LIMIT)
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
    "tune-offline",
    cls=PointsToSibling,
    sibling="tune",
    sibling_usage="tune NAME",
    sibling_mode="live tuning",
    short_help="Recommend num_speculative_tokens from measured acceptance and step times.",
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
To measure on a running container instead, launching it at each k:
  dflashops tune NAME (see `dflashops tune --help`).

\b
Examples:
  dflashops tune-offline --acceptance 0.80,0.574,0.40,0.236,0.1,0.05,0.02 \\
      --step-cost 1:0.020,2:0.022,4:0.026,8:0.034,15:0.048
  dflashops tune-offline --acceptance 0.80,0.53,0.32,0.22 --throughput 15:40,6:61.3
  dflashops tune-offline --from bench-k4.json --from bench-k8.json
  dflashops tune-offline --from runs.json --gpu "RTX A6000" --tp 2 --weights /models/t
""",
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
    type=SafePath(exists=True, dir_okay=False, path_type=Path),
    help="A bench report or a JSON file of runs (below); repeatable.",
)
@click.option(
    "--drafted-per-draft",
    type=FiniteFloatRange(min=0),
    help="Mean draft tokens proposed per draft, measured with --acceptance.",
)
@click.option("--draft-fraction", metavar="Q0,Q1,…", help="Share of drafts proposing position i.")
@click.option("--k-min", type=K_RANGE, default=1, show_default=True, help="Smallest k.")
@click.option("--k-max", type=K_RANGE, default=15, show_default=True, help="Largest k.")
@click.option(
    "--tolerance",
    type=FiniteFloatRange(0, 1, max_open=True),
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
def tune_offline(  # Click passes every option by keyword
    *,
    acceptance: str | None,
    conditional: bool,
    step_costs: tuple[str, ...],
    throughputs: tuple[str, ...],
    sources: tuple[Path, ...],
    drafted_per_draft: float | None,
    draft_fraction: str | None,
    k_min: int,
    k_max: int,
    tolerance: float,
    extrapolate: str,
    fit: str,
    roofline: RooflineRequest,
    as_json: bool,
) -> None:
    """Recommend num_speculative_tokens (k) from measured acceptance and step times, without a
    server: prints the predicted single-stream throughput per k and the best k.

    Give per-position acceptance (--acceptance, or runs in --from) and step times at two or
    more k (--step-cost, --throughput or runs in --from). An explicit --acceptance replaces
    the acceptance merged from --from runs. The model and its assumptions are below.
    """
    from pydantic import ValidationError

    from dflashops.errors import TuneInputError
    from dflashops.pydantic_errors import first_error_line
    from dflashops.tune.acceptance import Extrapolation
    from dflashops.tune.model import TuneSettings
    from dflashops.tune.offline import recommend_offline
    from dflashops.tune.request import OfflineTuneRequest
    from dflashops.tune.stepcost import FitMethod

    try:
        request = OfflineTuneRequest(
            acceptance=None if acceptance is None else _floats(acceptance, "--acceptance"),
            conditional=conditional,
            drafted_per_draft=drafted_per_draft,
            draft_fraction=None
            if draft_fraction is None
            else _floats(draft_fraction, "--draft-fraction"),
            runs=_timed_runs(step_costs, throughputs),
            sources=sources,
            settings=TuneSettings(
                k_min=k_min,
                k_max=k_max,
                tolerance=tolerance,
                extrapolation=Extrapolation(extrapolate),
                fit=FitMethod(fit),
            ),
            roofline=roofline,
        )
        result = recommend_offline(request)
    except TuneInputError as exc:
        if exc.field in OPTION_FIELDS:
            raise click.BadParameter(exc.one_line(), param_hint=f"'--{exc.field}'") from exc
        raise click.UsageError(exc.one_line()) from exc
    except ValidationError as exc:
        raise click.UsageError(first_error_line(exc)) from exc
    if as_json:
        click.echo(dump_json(result.model_dump(mode="json")))
        return
    from dflashops.cli.console import make_console
    from dflashops.tune.view import result_renderables

    console = make_console()
    for renderable in result_renderables(result):
        console.print(renderable)


def _floats(text: str, option: str) -> tuple[float, ...]:
    values: list[float] = []
    for part in _items([text]):
        try:
            value = float(part)
        except ValueError:
            raise click.BadParameter(
                f"{_shown(part)} is not a number", param_hint=f"'{option}'"
            ) from None
        if not math.isfinite(value):
            raise click.BadParameter(
                f"{_shown(part)} is not a finite number", param_hint=f"'{option}'"
            )
        values.append(value)
    if not values:
        raise click.BadParameter("no values", param_hint=f"'{option}'")
    return tuple(values)


def _items(values: tuple[str, ...] | list[str]) -> list[str]:
    return [part for value in values for part in re.split(r"[,\s]+", value.strip()) if part]


def _pairs(values: tuple[str, ...], option: str) -> list[tuple[int, str]]:
    pairs: list[tuple[int, str]] = []
    for item in _items(values):
        k_text, sep, value = item.partition(":")
        if not sep or not k_text.isdigit() or not value:
            raise click.BadParameter(
                f"{_shown(item)} is not K:VALUE with K 1..{K_LIMIT}", param_hint=f"'{option}'"
            )
        k = int(k_text) if len(k_text) <= len(str(K_LIMIT)) else K_LIMIT + 1
        if not 1 <= k <= K_LIMIT:
            raise click.BadParameter(
                f"{_shown(item)} is not K:VALUE with K 1..{K_LIMIT} (num_speculative_tokens; "
                "engines and the tuner accept no more)",
                param_hint=f"'{option}'",
            )
        pairs.append((k, value))
    return pairs


def _shown(text: str) -> str:
    """``text`` quoted for an error message, cut so a hostile argument stays one short line."""
    return repr(text) if len(text) <= 40 else repr(text[:37] + "...")


def _seconds(text: str) -> float:
    # one way to match each digit: "[0-9]*\.?[0-9]+" backtracks quadratically over long runs
    number = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
    match = re.fullmatch(rf"({number})\s*(ms|s)?", text.strip())
    if match is None or not 0 < float(match.group(1)) < math.inf:
        raise click.BadParameter(
            f"{_shown(text)} is not a positive duration (0.026, 0.026s or 26ms; finite)",
            param_hint="'--step-cost'",
        )
    value = float(match.group(1))
    return value / 1000 if match.group(2) == "ms" else value


def _positive(text: str, option: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < math.inf:  # NaN fails both comparisons
        raise click.BadParameter(
            f"{_shown(text)} is not a positive number (finite)", param_hint=f"'{option}'"
        )
    return value


def _timed_runs(step_costs: tuple[str, ...], throughputs: tuple[str, ...]) -> tuple[TuneRun, ...]:
    from dflashops.tune.runs import TuneRun

    runs = [
        TuneRun(k=k, step_time_s=_seconds(value), label=f"--step-cost {k}:{value}")
        for k, value in _pairs(step_costs, "--step-cost")
    ]
    runs.extend(
        TuneRun(k=k, output_tok_s=_positive(value, "--throughput"), label=f"--throughput {k}")
        for k, value in _pairs(throughputs, "--throughput")
    )
    return tuple(runs)
