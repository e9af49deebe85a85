"""Reading measured runs from a file (``tune-offline --from FILE``), or from a bench report in
memory (live ``tune NAME``).

The only place that knows file layouts; everything after it speaks ``TuneRun``. Two are read:

A ``dflashops bench`` report (``"kind": "dflashops-bench"``) gives one run: k is the config's
``num_speculative_tokens``; from the concurrency-1 level (the model is single-stream) the
decode rate 1000 / ``mean_tpot_ms`` (``output_throughput`` when TPOT is missing), the per-position
acceptance, the acceptance length, drafted tokens per draft (draft tokens / drafts) and the number
of drafts.

A hand-written JSON, a list of runs or an object with a ``runs`` list::

    {"runs": [
      {"k": 15, "output_tok_s": 40.0,
       "acceptance": [0.80, 0.53, 0.32, 0.22, 0.15, 0.10, 0.07, 0.05,
                      0.03, 0.02, 0.01, 0.01, 0.0, 0.0, 0.0]},
      {"k": 6, "step_time_s": 0.047, "acceptance_length": 2.9, "num_drafts": 1200}
    ]}

Each run: ``k`` (required); ``output_tok_s`` (single-stream) or ``step_time_s``; per-position
unconditional ``acceptance`` (at most k values) and/or ``acceptance_length``; optional
``drafted_per_draft`` (draft tokens / drafts), ``num_drafts`` (weight), ``label``. Unknown keys are
errors, so a typo cannot silently drop a measurement.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dflashops.bench.models import REPORT_KIND, BenchReport
from dflashops.errors import BenchmarkError, TuneInputError, read_capped, shorten
from dflashops.tune.runs import TuneRun


class RunsDocument(BaseModel):
    """The interim ``--from`` layout."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    runs: list[TuneRun] = Field(min_length=1)
    note: str | None = None


MAX_RUNS_BYTES = 64 * 1024 * 1024  # a bench report with per-request records at most


def load_runs(path: Path) -> list[TuneRun]:
    """The runs in ``path``, labelled ``FILE#N`` (or after the report) unless they carry one."""
    try:
        data = json.loads(read_capped(path, MAX_RUNS_BYTES).decode("utf-8"))
    except OSError as exc:
        raise TuneInputError(f"{path}: {exc.strerror or exc}", field="from") from exc
    except (ValueError, RecursionError) as exc:
        # undecodable text, broken JSON, an integer past Python's digit limit, deep nesting
        raise TuneInputError(f"{path}: not JSON ({shorten(str(exc), 120)})", field="from") from exc
    if isinstance(data, dict) and data.get("kind") == REPORT_KIND:
        return [_bench_run(path)]
    if isinstance(data, list):
        data = {"runs": data}
    try:
        document = RunsDocument.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "<document>"
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise TuneInputError(
            f"{path}: {where}: {first['msg']}{more}",
            field="from",
            hint="see `dflashops tune-offline --help` for the run layout",
        ) from exc
    return [
        run if run.label else run.model_copy(update={"label": f"{path.name}#{index}"})
        for index, run in enumerate(document.runs)
    ]


def _bench_run(path: Path) -> TuneRun:
    try:
        report = BenchReport.load(path)
    except BenchmarkError as exc:
        raise TuneInputError(exc.one_line(), field="from") from exc
    return run_from_report(report, path.name, where=str(path))


def run_from_report(report: BenchReport, origin: str, *, where: str | None = None) -> TuneRun:
    """The run one bench report measured, labelled ``origin (report label)``; errors name
    ``where`` (default ``origin``)."""
    where = where or origin
    k = report.config.num_speculative_tokens
    if not k or report.config.method == "none":
        raise TuneInputError(
            f"{where}: the benchmarked server ran without speculative decoding (no k to tune)",
            field="from",
        )
    level = report.level(1)
    if level is None:
        raise TuneInputError(
            f"{where}: no concurrency-1 level; the tuner models single-stream decode",
            field="from",
            hint="bench with --concurrency 1",
        )
    if level.incomplete:
        raise TuneInputError(
            f"{where}: the concurrency-1 level is incomplete (the server stopped answering)",
            field="from",
            hint="bench again once the server answers",
        )
    if level.mean_tpot_ms:
        rate = 1000.0 / level.mean_tpot_ms
    elif level.output_throughput > 0:
        rate = level.output_throughput
    else:
        raise TuneInputError(f"{where}: the concurrency-1 level has no throughput", field="from")
    drafts = level.spec_decode_num_drafts
    drafted = (
        level.spec_decode_draft_tokens / drafts
        if drafts and level.spec_decode_draft_tokens is not None
        else None
    )
    positions = level.spec_decode_per_position_acceptance_rates
    try:
        return TuneRun(
            k=k,
            output_tok_s=rate,
            acceptance=tuple(positions[:k]) if positions else None,
            acceptance_length=level.spec_decode_acceptance_length,
            drafted_per_draft=drafted,
            num_drafts=drafts or None,
            label=f"{origin} ({report.display_label()})",
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise TuneInputError(f"{where}: {first['msg']}", field="from") from exc
