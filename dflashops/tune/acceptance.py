"""Per-position acceptance, and what it means for tokens per verify step.

vLLM counts, for each draft position i, the drafts whose tokens 0..i were *all* accepted, and
divides by the number of drafts (``spec_decode_num_accepted_tokens_per_pos / num_drafts``, the
log's "Per-position acceptance rate"). Verification stops at the first rejected token, so that
rate r_i is the *unconditional* probability that the first i+1 draft tokens were all accepted. It
never rises with i, and one verify step with k draft tokens emits on average

    tokens_per_step(k) = 1 + Σ_{i<k} r_i

(the 1 is the token the target adds itself: the bonus or the correction). That is vLLM's mean
acceptance length, 1 + accepted / num_drafts. A *conditional* rate c_i = r_i / r_{i-1} (papers,
some dashboards) is converted with r_i = c_0·c_1·…·c_i.

A drafter may propose fewer than k tokens (n-gram finds no match, or a short one). Positions that
were not proposed count as not accepted, so r_i above already includes that. What it changes is
the cost: a verify step costs what it verifies, so the tuner also tracks the fraction q_i of drafts
that proposed position i (1 for DFlash/EAGLE, which always draft k) and prices a step by the
drafted tokens Σ_{i<k} q_i rather than by k.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from dflashops.errors import TuneInputError
from dflashops.tune.fitmath import bisect, isotonic, log_slope

# vLLM prints rates with three decimals, and merged windows wobble by about that much
ROUNDING_TOLERANCE = 0.01
# how many of the last measured positions the geometric tail is fitted to
TAIL_POSITIONS = 3


class Extrapolation(StrEnum):
    """How acceptance is extended past the last measured position."""

    GEOMETRIC = "geometric"
    ZERO = "zero"


class AcceptanceCurve(BaseModel):
    """Unconditional per-position acceptance, measured and extrapolated, with draft fractions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rates: tuple[float, ...] = Field(min_length=1, description="measured r_i, non-increasing")
    draft_fraction: tuple[float, ...] = Field(
        default=(),
        description="q_i: fraction of drafts that proposed position i; empty means all of them; "
        "the last value holds for later positions",
    )
    extrapolation: Extrapolation = Extrapolation.GEOMETRIC
    tail_ratio: float = Field(
        ge=0, le=1, description="r_{m-1+j} = r_{m-1}·tail_ratio^j past the m measured positions"
    )
    source: str = Field(description="where the rates came from")

    @property
    def measured_positions(self) -> int:
        return len(self.rates)

    def rate(self, position: int) -> float:
        """r_i, extrapolated past the measured positions."""
        measured = len(self.rates)
        if position < measured:
            return self.rates[position]
        return self.rates[-1] * self.tail_ratio ** (position - measured + 1)

    def drafted(self, position: int) -> float:
        """q_i, the fraction of drafts that proposed this position."""
        if not self.draft_fraction:
            return 1.0
        return self.draft_fraction[min(position, len(self.draft_fraction) - 1)]

    def tokens_per_step(self, k: int) -> float:
        """Mean tokens one verify step emits with ``k`` draft tokens (vLLM's acceptance length)."""
        return 1.0 + sum(self.rate(i) for i in range(k))

    def drafted_tokens(self, k: int) -> float:
        """Mean draft tokens one verify step checks with ``num_speculative_tokens = k``."""
        return sum(self.drafted(i) for i in range(k))

    def conditional(self) -> list[float]:
        """c_i = P(position i accepted | positions before it accepted), for measured positions."""
        return conditional_rates(self.rates)


def conditional_rates(rates: Sequence[float]) -> list[float]:
    out: list[float] = []
    previous = 1.0
    for rate in rates:
        out.append(rate / previous if previous > 0 else 0.0)
        previous = rate
    return out


def acceptance_curve(
    rates: Sequence[float],
    *,
    conditional: bool = False,
    draft_fraction: Sequence[float] | None = None,
    drafted_per_draft: float | None = None,
    extrapolation: Extrapolation = Extrapolation.GEOMETRIC,
    source: str = "given",
) -> AcceptanceCurve:
    """Validate measured rates and build the curve the tuner predicts with.

    ``drafted_per_draft`` is vLLM's ``num_draft_tokens / num_drafts`` measured with k equal to the
    number of ``rates``; it is read as "a fraction ρ = drafted/k of drafts propose full length,
    the rest propose nothing" (n-gram: match or no match), so q_i = max(ρ, r_i). Per-position
    ``draft_fraction`` is used as given. Only one of the two may be given.
    """
    values = _check_unit_interval(rates, "acceptance")
    if conditional:
        unconditional: list[float] = []
        product = 1.0
        for rate in values:
            product *= rate
            unconditional.append(product)
        values = unconditional
    else:
        _check_non_increasing(values, "acceptance", hint_conditional=True)
        values = isotonic(values, increasing=False)
    fractions = _draft_fractions(values, draft_fraction, drafted_per_draft)
    ratio = 0.0 if extrapolation is Extrapolation.ZERO else geometric_tail_ratio(values)
    if conditional:
        source = f"{source} (conditional)"
    return AcceptanceCurve(
        rates=tuple(values),
        draft_fraction=tuple(fractions),
        extrapolation=extrapolation,
        tail_ratio=ratio,
        source=source,
    )


def geometric_tail_ratio(rates: Sequence[float]) -> float:
    """Per-position decay past the last measured position; conservative by construction.

    The smaller of the least-squares exponential decay over the last ``TAIL_POSITIONS`` positions
    and the last conditional rate (one measured position: that rate itself, the classic constant-α
    model). A curve still at 1.0 stays at 1.0.
    """
    if not rates or rates[-1] <= 0:
        return 0.0
    last_conditional = conditional_rates(rates)[-1]
    tail = list(rates[-TAIL_POSITIONS:])
    fitted = log_slope(tail) if len(tail) >= 2 else last_conditional
    return max(0.0, min(1.0, last_conditional, fitted))


def alpha_from_acceptance_length(acceptance_length: float, k: int) -> float:
    """The constant conditional rate α with 1 + α + α² + … + α^k = ``acceptance_length``.

    For engines that report only a mean acceptance length (SGLang), at one k.
    """
    if k < 1:
        raise TuneInputError("acceptance length needs k ≥ 1", field="acceptance_length")
    if acceptance_length <= 1.0:
        return 0.0
    if acceptance_length >= 1.0 + k:
        return 1.0

    def length(alpha: float) -> float:
        return 1.0 + sum(alpha**j for j in range(1, k + 1))

    return bisect(length, 0.0, 1.0, acceptance_length)


def _check_unit_interval(values: Sequence[float], field: str) -> list[float]:
    out = [float(v) for v in values]
    if not out:
        raise TuneInputError(f"{field}: no values", field=field)
    for i, value in enumerate(out):
        if not 0.0 <= value <= 1.0:
            raise TuneInputError(
                f"{field}: position {i} is {value:g}, outside [0, 1]",
                field=field,
                hint="give rates as fractions (0.8), not percentages (80)",
            )
    return out


def _check_non_increasing(values: Sequence[float], field: str, *, hint_conditional: bool) -> None:
    for i in range(1, len(values)):
        if values[i] > values[i - 1] + ROUNDING_TOLERANCE:
            raise TuneInputError(
                f"{field}: rises from {values[i - 1]:g} at position {i - 1} to {values[i]:g} at "
                f"position {i}; unconditional per-position rates cannot rise",
                field=field,
                hint="these look like conditional rates: pass --conditional"
                if hint_conditional
                else None,
            )


def _draft_fractions(
    rates: Sequence[float],
    draft_fraction: Sequence[float] | None,
    drafted_per_draft: float | None,
) -> list[float]:
    measured_k = len(rates)
    if draft_fraction is not None and drafted_per_draft is not None:
        raise TuneInputError(
            "give per-position draft fractions or a mean drafted-tokens-per-draft, not both",
            field="drafted",
        )
    if drafted_per_draft is not None:
        accepted = sum(rates)
        if (
            not accepted - ROUNDING_TOLERANCE
            <= drafted_per_draft
            <= measured_k + ROUNDING_TOLERANCE
        ):
            raise TuneInputError(
                f"drafted tokens per draft {drafted_per_draft:g} must lie between the accepted "
                f"tokens per draft ({accepted:.3f}) and k = {measured_k} (the number of "
                "acceptance positions)",
                field="drafted-per-draft",
            )
        rho = min(1.0, drafted_per_draft / measured_k)
        # a drafter that always fills every slot (DFlash, EAGLE) needs no fractions
        return [] if rho >= 1.0 - 1e-9 else [max(rho, rate) for rate in rates]
    if draft_fraction is None:
        return []
    fractions = _check_unit_interval(draft_fraction, "draft-fraction")
    _check_non_increasing(fractions, "draft-fraction", hint_conditional=False)
    fractions = isotonic(fractions, increasing=False)
    for i, (rate, fraction) in enumerate(zip(rates, fractions, strict=False)):
        if rate > fraction + ROUNDING_TOLERANCE:
            raise TuneInputError(
                f"position {i}: acceptance {rate:g} exceeds the fraction drafted {fraction:g}",
                field="draft-fraction",
            )
    # rounding may leave q_i a hair below r_i; positions past the given ones keep the last q
    return [
        max(fractions[min(i, len(fractions) - 1)], rates[i] if i < measured_k else 0.0)
        for i in range(max(len(fractions), measured_k))
    ]
