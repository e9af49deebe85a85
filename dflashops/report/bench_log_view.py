"""Rich tables for ``parse-log``: throughput windows, spec-decode windows and their totals."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.table import Table

from dflashops.metrics.log_models import LogSummary, LogWindow, SpecDecodeTotals

CUT = "*"  # marks a window read from a line cut mid-way


def _num(value: float | int | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _table(title: str, windows: Sequence[LogWindow]) -> Table:
    days = sorted({w.timestamp.split()[0] for w in windows if w.timestamp})
    if days:
        title += f", {days[0]}" + (f" to {days[-1]}" if len(days) > 1 else "")
    return Table(
        title=title,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
        title_justify="left",
    )


def _time(window: LogWindow) -> str:
    return window.timestamp.split()[-1] if window.timestamp else "-"


def _source(window: LogWindow) -> str:
    return window.engine or window.process or "-"


def _several_sources(windows: Sequence[LogWindow]) -> bool:
    return len({_source(w) for w in windows}) > 1


def throughput_table(summary: LogSummary) -> Table:
    """Periodic stats lines: tokens/s, queue and cache, with the totals as the last row."""
    windows = summary.throughput_windows
    table = _table("Throughput windows (tokens/s)", windows)
    engines = _several_sources(windows)
    columns = ["line", "time", *(["engine"] if engines else []), "prompt", "gen"]
    for column in [*columns, "run/wait", "KV %", "prefix hit %"]:
        table.add_column(column, justify="left" if column in ("time", "engine") else "right")
    for w in windows:
        waiting = w.waiting if w.waiting is not None else w.pending  # V0 says "Pending"
        table.add_row(
            str(w.line),
            _time(w),
            *([_source(w)] if engines else []),
            _num(w.prompt_throughput),
            _num(w.generation_throughput),
            f"{_num(w.running, 'd')}/{_num(waiting, 'd')}",
            _num(w.kv_cache_usage_pct),
            _num(w.prefix_cache_hit_rate_pct),
        )
    totals = summary.throughput_totals
    table.add_section()
    table.add_row(
        "mean",
        f"{totals.active_windows}/{totals.windows} busy",
        *([f"{totals.engines} engines"] if engines else []),
        _num(totals.mean_prompt_throughput),
        _num(totals.mean_generation_throughput),
        "",
        "peak",
        _num(totals.peak_generation_throughput),
    )
    return table


def spec_decode_table(summary: LogSummary) -> Table:
    """Spec-decode lines, with the totals recomputed from their integer counts."""
    windows = summary.spec_decode_windows
    table = _table("Spec-decode windows", windows)
    engines = _several_sources(windows)
    columns = ["line", "time", *(["engine"] if engines else [])]
    # "rate %" as the line prints it; "draft acc %" = accepted / proposed drafts, every engine
    for column in [*columns, "acc/drafted", "rate %", "draft acc %", "MAL", "drafts"]:
        table.add_column(column, justify="left" if column in ("time", "engine") else "right")
    table.add_column("per-position acceptance")  # wraps between rates, never inside one
    for w in windows:
        drafts = w.drafts_estimate()
        table.add_row(
            f"{w.line}{CUT if w.truncated else ''}",
            _time(w),
            *([_source(w)] if engines else []),
            _pair(w.accepted_tokens, w.drafted_tokens),
            _num(w.acceptance_rate_pct),
            _num(w.draft_acceptance_rate_pct),
            _num(w.mean_acceptance_length, ".2f"),
            "-" if drafts is None else f"{'' if drafts[1] else '≈'}{drafts[0]}",
            _positions(w.per_position_acceptance),
        )
    totals = summary.spec_decode_totals
    if totals is not None:
        table.add_section()
        row = _totals_row(totals)
        table.add_row(*row[:2], *([""] if engines else []), *row[2:])
    return table


def _pair(accepted: int | None, drafted: int | None) -> str:
    return "-" if accepted is None else f"{accepted}/{_num(drafted, 'd')}"


def _totals_row(totals: SpecDecodeTotals) -> list[str]:
    drafts = "-"
    if totals.num_drafts is not None:
        drafts = f"{'' if totals.num_drafts_exact else '≈'}{totals.num_drafts}"
    return [
        "total",
        "since start" if totals.cumulative else f"{totals.windows} lines",
        _pair(totals.accepted_tokens, totals.drafted_tokens),
        _num(totals.acceptance_rate_pct),
        _num(totals.draft_acceptance_rate_pct),
        _num(totals.mean_acceptance_length, ".2f"),
        drafts,
        _positions(totals.per_position_acceptance),
    ]


def _positions(rates: list[float]) -> str:
    return " ".join(f"{r:.2f}" for r in rates) or "-"


def log_notes(summary: LogSummary) -> list[str]:
    """Footnotes a reader needs to trust the totals."""
    notes = []
    if any(w.truncated for w in summary.spec_decode_windows):
        notes.append(f"{CUT} the line was cut mid-way: the window holds what it printed.")
    totals = summary.spec_decode_totals
    if totals is not None and totals.num_drafts is not None and not totals.num_drafts_exact:
        notes.append(
            "≈ drafts = accepted / (MAL − 1), rounded: MAL is printed with two decimals, so in "
            "large windows several integers fit; the acceptance length and per-position totals "
            "inherit that uncertainty."
        )
    if totals is not None and totals.cumulative:
        notes.append("vLLM V0 prints counts since engine start: totals are the last line's.")
    if totals is not None and totals.accepted_tokens is None:
        notes.append("SGLang prints no counts: the total is the mean of the windows' accept len.")
    return notes
