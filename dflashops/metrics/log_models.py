"""What ``parse_log`` reads from a server log: one window per periodic stats line (throughput,
spec decoding), and the totals over a log; plus the verify-step estimate a window's numbers
allow."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

Source = Literal["vllm", "vllm-v0", "sglang"]

# What a printed acceptance rate divides by what. The engines disagree, and SGLang changed its own.
RateFormula = Literal[
    "accepted/drafted",
    "v0-accepted/drafted",
    "sglang-with-bonus",
    "sglang-drafts-only",
    "sglang-either",
    "unknown",
]
RATE_FORMULAS: dict[str, str] = {
    "accepted/drafted": "accepted draft tokens / drafted tokens (vLLM V1)",
    "v0-accepted/drafted": (
        "accepted / drafted tokens, counting draft tokens accepted after an earlier rejection "
        "that the output never used (vLLM V0)"
    ),
    "sglang-with-bonus": (
        "accept len / draft tokens per step: the bonus token counted as accepted and the current "
        "token as drafted (SGLang before PR #23530, merged 2026-04-23)"
    ),
    "sglang-drafts-only": (
        "(accept len - 1) / (draft tokens per step - 1): drafts only (SGLang from PR #23530)"
    ),
    "sglang-either": (
        "either SGLang formula: the windows fit both with the same draft tokens per step n, "
        "where they agree (accept rate 1.00 at accept len n: every draft accepted)"
    ),
    "unknown": "not known: neither the log nor its numbers tell which formula printed it",
}
CONSISTENT_RATE = (
    "draft acceptance rate = draft tokens the output kept / draft tokens proposed, i.e. "
    "(mean acceptance length - 1) / k for a fixed k; vLLM V1's definition"
)


class LogWindow(BaseModel):
    """Where a line came from. ``timestamp`` is the log's own ``MM-DD HH:MM:SS`` (no year)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    line: int
    timestamp: str | None = None
    pid: int | None = None
    process: str | None = None
    engine: str | None = None
    source: Source = "vllm"
    truncated: bool = False
    """The line stops before its format's last part (cut mid-way): read up to where it stops."""


class ThroughputWindow(LogWindow):
    """One periodic stats line. Throughputs in tokens/s, percentages as printed (0–100)."""

    prompt_throughput: float | None = None
    generation_throughput: float | None = None
    running: int | None = None
    waiting: int | None = None
    swapped: int | None = None
    pending: int | None = None
    deferred: int | None = None
    preemptions: int | None = None
    corrupted: int | None = None
    kv_fetch_waiting: int | None = None
    kv_fetch_in_progress: int | None = None
    kv_fetch_completed_waiting: int | None = None
    kv_cache_device: str | None = None
    kv_cache_usage_pct: float | None = None
    cpu_kv_cache_usage_pct: float | None = None
    prefix_cache_hit_rate_pct: float | None = None
    cpu_prefix_cache_hit_rate_pct: float | None = None
    external_prefix_cache_hit_rate_pct: float | None = None
    mm_cache_hit_rate_pct: float | None = None
    used_tokens: int | None = None

    @property
    def active(self) -> bool:
        return bool(self.generation_throughput or self.prompt_throughput)


class SpecDecodeWindow(LogWindow):
    """One spec-decode line.

    ``accepted_tokens``/``drafted_tokens`` are the integers the line prints: per interval for vLLM
    V1, since engine start for V0 (``cumulative``). SGLang prints only ``accept len`` and ``accept
    rate``. ``acceptance_rate_pct`` is the printed rate, in percent, computed as
    ``acceptance_rate_formula`` says; ``draft_acceptance_rate_pct`` is the same quantity in one
    definition for every engine and version (``CONSISTENT_RATE``), None where the line does not
    allow it. ``mean_acceptance_length`` is tokens per verify step, bonus token included: vLLM V1
    and SGLang print it; for V0 it is emitted / steps (= system efficiency × (k + 1)).
    """

    mean_acceptance_length: float | None = None
    accepted_tokens: int | None = None
    drafted_tokens: int | None = None
    acceptance_rate_pct: float | None = None
    accepted_throughput: float | None = None
    drafted_throughput: float | None = None
    per_position_acceptance: list[float] = []
    num_spec_tokens: int | None = None
    emitted_tokens: int | None = None
    system_efficiency: float | None = None
    cumulative: bool = False
    acceptance_rate_formula: RateFormula | None = None
    draft_acceptance_rate_pct: float | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_drafts(self) -> int | None:
        """Verify steps in the window; see ``estimate_num_drafts`` for how and how exactly."""
        estimate = self.drafts_estimate()
        return estimate[0] if estimate else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def num_drafts_exact(self) -> bool:
        estimate = self.drafts_estimate()
        return bool(estimate and estimate[1])

    def drafts_estimate(self) -> tuple[int, bool] | None:
        if self.source == "vllm-v0":
            # every V0 step drafts k tokens per sequence; "accepted" counts tokens after a
            # rejection too, so emitted - accepted is not the step count
            if self.num_spec_tokens and self.drafted_tokens is not None:
                steps, rest = divmod(self.drafted_tokens, self.num_spec_tokens)
                return steps, rest == 0
            return None
        return estimate_num_drafts(
            self.accepted_tokens,
            self.mean_acceptance_length,
            drafted=self.drafted_tokens,
            per_position=self.per_position_acceptance,
            k=self.num_spec_tokens,
        )


class ThroughputTotals(BaseModel):
    """Over all stats lines. Means are over active windows (any tokens/s), summed over engines."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    windows: int
    active_windows: int
    engines: int
    mean_prompt_throughput: float | None
    mean_generation_throughput: float | None
    peak_generation_throughput: float | None


class SpecDecodeTotals(BaseModel):
    """Over all spec-decode lines, recomputed from the integer Accepted/Drafted counts.

    ``num_drafts`` is derived from each window's mean acceptance length (drafts = accepted /
    (MAL − 1), rounded); MAL is printed with two decimals, so in large windows several integers
    fit and ``num_drafts_exact`` is False. The per-position rates are the windows' rates weighted
    by their drafts. For V0 logs, whose counts are cumulative, the totals are the last line's.
    SGLang prints no counts: only a mean of the windows' accept lengths is given.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    windows: int
    accepted_tokens: int | None
    drafted_tokens: int | None
    acceptance_rate_pct: float | None
    num_drafts: int | None
    num_drafts_exact: bool
    mean_acceptance_length: float | None
    per_position_acceptance: list[float]
    cumulative: bool = False
    emitted_tokens: int | None = None
    acceptance_rate_formula: RateFormula | None = None
    draft_acceptance_rate_pct: float | None = None


class LogSummary(BaseModel):
    """What ``parse-log`` reports."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine_version: str | None
    engine: Literal["vllm", "sglang"] | None = None
    throughput_windows: list[ThroughputWindow]
    spec_decode_windows: list[SpecDecodeWindow]
    throughput_totals: ThroughputTotals
    spec_decode_totals: SpecDecodeTotals | None
    notes: list[str] = []
    """What a reader needs to trust the numbers: formulas found, lines cut, ambiguities."""
    skipped_lines: list[int] = []
    """Stats lines skipped for a number no engine prints (``inf``, more than 30 digits)."""


def estimate_num_drafts(
    accepted: int | None,
    mean_acceptance_length: float | None,
    *,
    drafted: int | None = None,
    per_position: list[float] | None = None,
    k: int | None = None,
) -> tuple[int, bool] | None:
    """Drafts in a vLLM V1 window, and whether that integer is certain.

    vLLM prints MAL = 1 + accepted/drafts with two decimals, so drafts = accepted / (MAL − 1)
    holds only up to rounding: the true MAL lies within ±0.005, which bounds drafts to an
    interval. The per-position rates (three decimals each; their sum is accepted/drafts) and
    drafts ≤ drafted narrow it further. One integer left: exact. Several: drafted / k when that
    is a whole number inside the interval (what a fixed-k drafter does), else the rounded
    quotient, clamped into the interval; flagged inexact. Nothing accepted: drafted / k rounded
    up (inexact: a draft may hold fewer than k). k is the depth the line prints, if any, else
    the number of printed positions.
    """
    k = k or (len(per_position) if per_position else None)
    if accepted is None or mean_acceptance_length is None or math.isnan(mean_acceptance_length):
        return None
    if accepted == 0:
        if drafted == 0:
            return 0, True
        if drafted and k:
            # nothing accepted: MAL is 1.00 whatever the drafts; a draft holds at most k tokens,
            # exactly k for fixed-k drafters such as DFlash
            return math.ceil(drafted / k), False
        return None
    low, high = 1.0, math.inf
    # accepted / drafts within [MAL - 1 - 0.005, MAL - 1 + 0.005]
    ratio_bounds = [(mean_acceptance_length - 1.0, 0.005)]
    if per_position:
        ratio_bounds.append((math.fsum(per_position), 0.0005 * len(per_position)))
    for centre, half_width in ratio_bounds:
        top, bottom = centre + half_width, centre - half_width
        if top > 0:
            low = max(low, accepted / top)
        if bottom > 0:
            high = min(high, accepted / bottom)
    if drafted:
        high = min(high, float(drafted))
    lo, hi = math.ceil(low - 1e-9), math.floor(high + 1e-9) if math.isfinite(high) else None
    guess = round(accepted / (mean_acceptance_length - 1.0)) if mean_acceptance_length > 1 else lo
    if drafted and k and drafted % k == 0:
        # fixed-k drafters (EAGLE, MTP, DFlash) draft exactly k per step: prefer that count
        whole = drafted // k
        if lo <= whole and (hi is None or whole <= hi):
            guess = whole
    if hi is None or lo > hi:
        return max(guess, 1), False
    return min(max(guess, lo), hi), lo == hi
