"""Rich tables for ``report``: one saved benchmark, or several compared against the first."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict
from rich import box
from rich.console import RenderableType
from rich.table import Table

from dflashops.bench.models import BenchReport, LevelResult

# key, heading, format, True when higher is better; the JSON carries every key, the table the
# first TABLE_COLUMNS
COMPARED: tuple[tuple[str, str, str, bool], ...] = (
    ("output_throughput", "out tok/s", ".1f", True),
    ("mean_tpot_ms", "TPOT ms", ".2f", False),
    ("p99_tpot_ms", "p99 TPOT", ".2f", False),
    ("mean_ttft_ms", "TTFT ms", ".1f", False),
    ("spec_decode_acceptance_length", "AL", ".2f", True),
    ("request_throughput", "req/s", ".3f", True),
    ("mean_itl_ms", "ITL ms", ".2f", False),
    ("mean_e2el_ms", "E2EL ms", ".0f", False),
    ("spec_decode_acceptance_rate", "acc %", ".1f", True),
)
TABLE_COLUMNS = 5


@dataclass(frozen=True)
class LabelledReport:
    """A loaded report with the name tables and legends show for it."""

    label: str
    path: str
    report: BenchReport


class ComparisonRow(BaseModel):
    """One report at one concurrency, against the first report at the same concurrency."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str
    path: str
    max_concurrency: int
    values: dict[str, float | None]
    delta_pct: dict[str, float | None]
    baseline: bool
    incomplete: bool = False


def label_reports(loaded: Sequence[tuple[Path, BenchReport]]) -> list[LabelledReport]:
    """Each report's label; the file name is added where two labels would read the same."""
    labels = [report.display_label() for _, report in loaded]
    result = []
    for (path, report), label in zip(loaded, labels, strict=True):
        unique = f"{label} ({path.stem})" if labels.count(label) > 1 else label
        result.append(LabelledReport(label=unique, path=str(path), report=report))
    return result


def _fmt(value: Any, fmt: str = ".1f") -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return format(value, fmt)


def config_table(item: LabelledReport) -> Table:
    report = item.report
    table = Table(title=f"{item.label} — {item.path}", show_header=False)
    table.add_column("key", style="bold")
    table.add_column("value")
    cfg = report.config
    rows = [
        ("created", report.created_at.isoformat(timespec="seconds")),
        ("server", " ".join(filter(None, [cfg.container, cfg.url])) or "-"),
        ("engine", " ".join(filter(None, [cfg.engine, cfg.engine_version])) or "-"),
        ("model", cfg.model or cfg.served_model_name or "-"),
        ("drafter", cfg.drafter or "-"),
        ("method / k", f"{cfg.method or '-'} / {_fmt(cfg.num_speculative_tokens, 'd')}"),
        ("max_model_len", _fmt(cfg.max_model_len, "d")),
        (
            "workload",
            f"{report.workload.name} ({report.workload.api}): "
            f"{report.workload.requests_per_level} requests/level after "
            f"{report.workload.warmup_requests} warm-up, max_tokens "
            f"{report.workload.max_tokens}, temperature {report.workload.temperature}"
            + (", ignore_eos" if report.workload.ignore_eos else ""),
        ),
        ("dflashops", cfg.dflashops_version),
    ]
    for key, value in rows:
        table.add_row(key, value)
    return table


def _table(title: str) -> Table:
    return Table(
        title=title,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        title_justify="left",
    )


def _conc(level: LevelResult) -> str:
    """The concurrency cell; a level the server stopped answering in says so."""
    concurrency = str(level.max_concurrency)
    return f"{concurrency} (incomplete)" if level.incomplete else concurrency


def _mean_p99(level: LevelResult, metric: str, fmt: str) -> str:
    return f"{_fmt(level.metric('mean', metric), fmt)}/{_fmt(level.metric('p99', metric), fmt)}"


def levels_table(item: LabelledReport) -> Table:
    """Client-side numbers by concurrency (latencies in ms, mean / p99)."""
    table = _table(f"{item.label}: client side (ms: mean/p99)")
    for heading in ("conc", "ok/fail", "out tok/s", "req/s", "TTFT", "TPOT", "ITL", "E2EL"):
        table.add_column(heading, justify="right")
    for lv in item.report.levels:
        table.add_row(
            _conc(lv),
            f"{lv.completed}/{lv.failed}" + (f" ({lv.not_sent} not sent)" if lv.not_sent else ""),
            _fmt(lv.output_throughput),
            _fmt(lv.request_throughput, ".2f"),
            _mean_p99(lv, "ttft", ".1f"),
            _mean_p99(lv, "tpot", ".2f"),
            _mean_p99(lv, "itl", ".2f"),
            _mean_p99(lv, "e2el", ".0f"),
        )
    return table


def spec_table(item: LabelledReport) -> Table:
    """Server-side spec decode by concurrency (the /metrics counters over each level)."""
    table = _table(f"{item.label}: speculative decoding (server counters)")
    for heading in ("conc", "tok/chunk", "AL", "acc %", "drafts", "accepted/drafted"):
        table.add_column(heading, justify="right")
    table.add_column("per-position acceptance")  # wraps between rates, never inside one
    for lv in item.report.levels:
        table.add_row(
            _conc(lv),
            _fmt(lv.mean_tokens_per_chunk, ".2f"),
            _fmt(lv.spec_decode_acceptance_length, ".2f"),
            _fmt(lv.spec_decode_acceptance_rate),
            _fmt(lv.spec_decode_num_drafts, "d"),
            f"{_fmt(lv.spec_decode_accepted_tokens, 'd')}/{_fmt(lv.spec_decode_draft_tokens, 'd')}",
            " ".join(f"{r:.2f}" for r in lv.spec_decode_per_position_acceptance_rates or []) or "-",
        )
    return table


def has_spec(item: LabelledReport) -> bool:
    return any(lv.spec_decode_draft_tokens is not None for lv in item.report.levels)


def roofline_line(item: LabelledReport) -> str | None:
    """One line for the report's roofline section: the ceiling and the share reached."""
    roof = item.report.roofline
    if not roof:
        return None
    hardware = f"{roof.get('gpu') or 'given'} {roof['bandwidth_gbps']:g} GB/s x tp {roof['tp']}"
    line = (
        f"roofline: {hardware} / {roof['bytes_per_step'] / 1e9:.3g} GB per step = "
        f"{roof['ceiling_tok_s_at_al1']:.1f} tok/s x AL {roof['acceptance_length']:.2f} = "
        f"{roof['ceiling_tok_s']:.1f} tok/s"
    )
    measured, share = roof.get("measured_tok_s"), roof.get("fraction_of_ceiling")
    if measured is not None and share is not None:
        line += f"; concurrency 1 decodes {measured:.1f} tok/s ({share:.0%} of it)"
    return line


def level_errors(item: LabelledReport) -> list[str]:
    return [
        f"{item.label} c={lv.max_concurrency}: {error}"
        for lv in item.report.levels
        for error in lv.errors
    ]


def bench_renderables(item: LabelledReport, *, with_config: bool) -> list[RenderableType]:
    """Everything a human sees of one saved bench, in order: the config (``report`` shows it;
    ``bench`` has just printed its progress instead), the levels, spec decoding, the roofline,
    the server log's agreement with the counters, failed requests, where the run stopped (the
    server stopped answering), notes and warnings."""
    report = item.report
    shown: list[RenderableType] = [config_table(item)] if with_config else []
    shown.append(levels_table(item))
    if has_spec(item):
        shown.append(spec_table(item))
    if line := roofline_line(item):
        shown.append(line)
    verdict = {True: "agrees with /metrics", False: "DISAGREES with /metrics", None: ""}
    for level in report.levels:
        check = level.server_log
        if check is not None:
            shown.append(
                f"server log, concurrency {level.max_concurrency}: {check.spec_decode_windows} "
                f"spec-decode lines, Accepted {check.accepted_tokens} / Drafted "
                f"{check.drafted_tokens} {verdict[check.agrees]}".rstrip()
            )
    shown += [f"[red]failed requests[/red] {error}" for error in level_errors(item)]
    if report.stopped is not None:
        shown.append(f"[red]stopped:[/red] {report.stopped.message}")
    shown += [f"[dim]note: {note}[/dim]" for note in report.notes]
    warnings = [*report.warnings, *(w for lv in report.levels for w in lv.warnings)]
    shown += [f"[yellow]warning:[/yellow] {warning}" for warning in warnings]
    return shown


def comparison_rows(items: Sequence[LabelledReport]) -> list[ComparisonRow]:
    """Every (report, level), with deltas in percent against the first report's same level."""
    if not items:
        return []
    baseline = items[0].report
    rows = []
    for index, item in enumerate(items):
        for lv in item.report.levels:
            base = baseline.level(lv.max_concurrency)
            values = {key: _value(lv, key) for key, *_ in COMPARED}
            rows.append(
                ComparisonRow(
                    label=item.label,
                    path=item.path,
                    max_concurrency=lv.max_concurrency,
                    values=values,
                    delta_pct={
                        key: None if base is None else _delta_pct(values[key], _value(base, key))
                        for key, *_ in COMPARED
                    },
                    baseline=index == 0,
                    incomplete=lv.incomplete,
                )
            )
    return sorted(rows, key=lambda r: (r.max_concurrency, not r.baseline))


def _value(level: LevelResult, key: str) -> float | None:
    value = getattr(level, key)
    return None if value is None else float(value)


def _delta_pct(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return 100.0 * (value - base) / base


def comparison_table(rows: Sequence[ComparisonRow]) -> Table:
    baseline = next((r.label for r in rows if r.baseline), "the first report")
    table = _table(f"Comparison: change vs {baseline} at the same concurrency")
    table.add_column("conc", justify="right")
    table.add_column("run")
    shown = COMPARED[:TABLE_COLUMNS]
    for _, heading, _, _ in shown:
        table.add_column(heading, justify="right")
    for row in rows:
        cells = []
        for key, _, fmt, higher_better in shown:
            text = _fmt(row.values[key], fmt)
            change = row.delta_pct[key]
            if not row.baseline and change is not None and text != "-":
                colour = "green" if (change > 0) == higher_better else "red"
                if abs(change) < 0.5:
                    colour = "dim"
                text += f" [{colour}]{change:+.0f}%[/{colour}]"
            cells.append(text)
        run = f"{row.label} (incomplete)" if row.incomplete else row.label
        table.add_row(str(row.max_concurrency), run, *cells)
    return table


def report_document(
    items: Sequence[LabelledReport], plots: Sequence[Path] = (), with_requests: bool = False
) -> dict[str, Any]:
    """The ``report --json`` document."""
    documents = []
    for item in items:
        data = json.loads(item.report.model_dump_json())  # NaN/inf become null, as JSON wants
        if not with_requests:
            for level in data["levels"]:
                level.pop("requests", None)
        documents.append({"path": item.path, "display_label": item.label, **data})
    document: dict[str, Any] = {"reports": documents}
    if len(items) > 1:
        document["comparison"] = [row.model_dump() for row in comparison_rows(items)]
    if plots:
        document["plots"] = [str(p) for p in plots]
    return document
