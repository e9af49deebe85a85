"""Totals over a log's windows: throughput means and the spec-decode counts and rates, each
window weighted by what it measured."""

from __future__ import annotations

import math

from dflashops.metrics.log_models import (
    SpecDecodeTotals,
    SpecDecodeWindow,
    ThroughputTotals,
    ThroughputWindow,
)


def throughput_totals(windows: list[ThroughputWindow]) -> ThroughputTotals:
    active = [w for w in windows if w.active]
    by_engine: dict[tuple[object, ...], list[ThroughputWindow]] = {}
    for window in active:
        by_engine.setdefault((window.pid, window.process, window.engine), []).append(window)

    def summed_mean(values: dict[tuple[object, ...], list[float]]) -> float | None:
        means = [math.fsum(v) / len(v) for v in values.values() if v]
        return math.fsum(means) if means else None

    def per_engine(attr: str) -> dict[tuple[object, ...], list[float]]:
        return {
            key: [value for w in group if (value := getattr(w, attr)) is not None]
            for key, group in by_engine.items()
        }

    peaks = [w.generation_throughput for w in windows if w.generation_throughput is not None]
    return ThroughputTotals(
        windows=len(windows),
        active_windows=len(active),
        engines=len({(w.pid, w.process, w.engine) for w in windows}),
        mean_prompt_throughput=summed_mean(per_engine("prompt_throughput")),
        mean_generation_throughput=summed_mean(per_engine("generation_throughput")),
        peak_generation_throughput=max(peaks) if peaks else None,
    )


def spec_decode_totals(windows: list[SpecDecodeWindow]) -> SpecDecodeTotals:
    cumulative = any(w.cumulative for w in windows)
    if cumulative:
        # counts since engine start: the last line of each engine holds its totals
        last: dict[tuple[object, ...], SpecDecodeWindow] = {}
        for window in windows:
            if window.cumulative:
                last[(window.pid, window.process, window.engine)] = window
        counted = list(last.values())
    else:
        counted = windows
    formulas = {w.acceptance_rate_formula for w in windows if w.acceptance_rate_pct is not None}
    formula = formulas.pop() if len(formulas) == 1 else None
    with_counts = [w for w in counted if w.accepted_tokens is not None]
    if not with_counts:  # SGLang: only per-window accept lengths and rates
        return SpecDecodeTotals(
            windows=len(windows),
            accepted_tokens=None,
            drafted_tokens=None,
            acceptance_rate_pct=_mean([w.acceptance_rate_pct for w in windows]),
            num_drafts=None,
            num_drafts_exact=False,
            mean_acceptance_length=_mean([w.mean_acceptance_length for w in windows]),
            per_position_acceptance=[],
            acceptance_rate_formula=formula,
            draft_acceptance_rate_pct=_mean([w.draft_acceptance_rate_pct for w in windows]),
        )
    accepted = sum(w.accepted_tokens or 0 for w in with_counts)
    drafted_values = [w.drafted_tokens for w in with_counts]
    drafted = None if None in drafted_values else sum(d or 0 for d in drafted_values)
    estimates = [w.drafts_estimate() for w in with_counts]
    drafts = None if None in estimates else sum(e[0] for e in estimates if e)
    emitted_values = [w.emitted_tokens for w in with_counts]
    emitted = (
        None if not cumulative or None in emitted_values else sum(e or 0 for e in emitted_values)
    )
    if cumulative:
        # V0: accepted counts tokens after a rejection; the output kept emitted - steps
        length = emitted / drafts if drafts and emitted is not None else None
        kept = emitted - drafts if drafts is not None and emitted is not None else None
    else:
        length = 1.0 + accepted / drafts if drafts else None
        kept = accepted
    return SpecDecodeTotals(
        windows=len(windows),
        accepted_tokens=accepted,
        drafted_tokens=drafted,
        acceptance_rate_pct=100.0 * accepted / drafted if drafted else None,
        num_drafts=drafts,
        num_drafts_exact=all(e is not None and e[1] for e in estimates),
        mean_acceptance_length=length,
        per_position_acceptance=_weighted_positions(with_counts, estimates),
        cumulative=cumulative,
        emitted_tokens=emitted,
        acceptance_rate_formula=formula,
        draft_acceptance_rate_pct=100.0 * kept / drafted if drafted and kept is not None else None,
    )


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return math.fsum(present) / len(present) if present else None


def _weighted_positions(
    windows: list[SpecDecodeWindow], estimates: list[tuple[int, bool] | None]
) -> list[float]:
    width = max((len(w.per_position_acceptance) for w in windows), default=0)
    result = []
    for pos in range(width):
        pairs = [
            (w.per_position_acceptance[pos], e[0])
            for w, e in zip(windows, estimates, strict=True)
            if e and e[0] and pos < len(w.per_position_acceptance)
        ]
        weight = sum(d for _, d in pairs)
        if not weight:
            break
        result.append(math.fsum(rate * d for rate, d in pairs) / weight)
    return result
