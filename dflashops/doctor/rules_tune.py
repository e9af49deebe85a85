"""Per-position acceptance that collapses before k: what ``tune`` would gain, from its model.

The tune model (``dflashops.tune``) predicts throughput(k) = tokens_per_step(k) / t(k). The
acceptance curve is the one measured now; the step time needs two measured k to fit its slope
and a running server gives one, so the slope is an assumption, stated in the finding: each draft
token adds ``DRAFT_TOKEN_COST`` of the step time at k=0 (a batch-1 verify step reads the weights
once whatever it checks; the drafter's share grows with k). ``dflashops tune NAME`` measures it.

Under load that model is one request's. Where a ``tune NAME --load`` model covers the batch size
the server runs, that model decides instead (:mod:`.rules_tune_load`); where it does not, this
rule runs as before and says how to get one.
"""

from __future__ import annotations

from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Finding
from dflashops.doctor.rules import RuleResult, ok, rates, skip
from dflashops.doctor.rules_tune_load import judge_load
from dflashops.errors import TuneInputError
from dflashops.tune.acceptance import acceptance_curve
from dflashops.tune.model import choose_k, predict
from dflashops.tune.stepcost import FitPoint, StepCostFit

DRAFT_TOKEN_COST = 0.05
# below this predicted gain, tuning is not worth a finding
MIN_GAIN = 0.03
# a position accepted less often than this adds little but its cost
COLLAPSED = 0.1


def assumed_step_cost(k: int, step_s: float) -> StepCostFit:
    """t(x) = a + b·x through the one measured step (k, step_s), with b = DRAFT_TOKEN_COST·a."""
    intercept = step_s / (1.0 + DRAFT_TOKEN_COST * k)
    point = FitPoint(
        k=k,
        drafted_tokens=float(k),
        seconds=step_s,
        fitted_s=step_s,
        residual_s=0.0,
        relative_residual=0.0,
    )
    return StepCostFit(
        kind="linear",
        intercept_s=intercept,
        slope_s_per_token=DRAFT_TOKEN_COST * intercept,
        points=(point,),
        rmse_s=0.0,
        max_relative_residual=0.0,
        notes=(f"slope assumed: each draft token costs {DRAFT_TOKEN_COST:.0%} of a k=0 step",),
    )


def tune_gain(facts: DoctorFacts) -> RuleResult:
    """k at the batch the server runs by the per-level model, else the concurrency-1 model."""
    judged = judge_load(facts)
    if judged.result is not None:
        return judged.result
    result = concurrency_one(facts)
    if not judged.note:
        return result
    if result.findings:
        result.findings = [
            f.model_copy(update={"evidence": (*f.evidence, judged.note)}) for f in result.findings
        ]
    elif result.skipped:
        result.skipped = f"{result.skipped}; {judged.note}"
    else:
        result.note = f"{result.note}; {judged.note}" if result.note else judged.note
    return result


def concurrency_one(facts: DoctorFacts) -> RuleResult:
    """Acceptance collapsing before k, with one request's step-cost model (module doc)."""
    acceptance, k = facts.acceptance, facts.k
    if acceptance is None or not acceptance.per_position:
        return skip("no per-position acceptance measured")
    if k is None or k < 2:
        return skip(f"k={k}: nothing to shorten")
    measured = acceptance.per_position[:k]
    if len(measured) < k:
        return skip(f"acceptance measured at {len(measured)} of k={k} positions")
    if measured[0] < COLLAPSED:
        return skip("position 0 itself is near zero: a drafter problem, not k")
    try:
        curve = acceptance_curve(list(measured), source=acceptance.source)
    except TuneInputError as exc:
        return skip(f"acceptance curve: {exc.one_line()}")
    # relative units when the step time is unknown: the gain is a ratio either way
    step_s = acceptance.step_s or 1.0
    timed = acceptance.step_s is not None
    rows = predict(curve, assumed_step_cost(k, step_s), 1, k)
    by_k = {row.k: row for row in rows}
    best = choose_k({row.k: row.throughput_tok_s for row in rows})
    now = by_k[k]
    gain = by_k[best].throughput_tok_s / now.throughput_tok_s - 1.0
    collapse = next((i for i, r in enumerate(curve.rates) if r < COLLAPSED), None)
    if best >= k or gain < MIN_GAIN:
        where = "" if collapse is None else f"; positions from {collapse} under {COLLAPSED}"
        return ok(f"k={k} is the model's best for this curve{where}")
    unit = "tok/s" if timed else "(relative)"

    def shown(value: float) -> str:
        return f"{value:.1f} {unit}" if timed else f"{value / now.throughput_tok_s:.3f}"

    title = (
        f"acceptance collapses from position {collapse}: k={k} drafts tokens that are "
        f"rarely accepted; tune predicts k={best}, {gain:+.0%}"
        if collapse is not None
        else f"per-position acceptance falls fast: tune predicts k={best}, {gain:+.0%} over k={k}"
    )
    return RuleResult(
        [
            Finding(
                rule="tune",
                severity="warning",
                title=title,
                evidence=(
                    f"per-position acceptance {rates(measured)} ({acceptance.source})",
                    f"tokens per step: {now.tokens_per_step:.2f} at k={k}, "
                    f"{by_k[best].tokens_per_step:.2f} at k={best}",
                    f"predicted throughput: {shown(now.throughput_tok_s)} at k={k}, "
                    f"{shown(by_k[best].throughput_tok_s)} at k={best}"
                    + (f" (step {step_s * 1000:.1f} ms measured at k={k})" if timed else ""),
                    f"assumed: each draft token costs {DRAFT_TOKEN_COST:.0%} of a k=0 step "
                    "(one measured k cannot fit the slope; tune measures it)",
                ),
                fix=f"dflashops tune {facts.container}",
                impact=min(1.0, gain / (1.0 + gain)),
                details={
                    "k": k,
                    "best_k": best,
                    "predicted_gain": gain,
                    "predictions": [
                        {
                            "k": r.k,
                            "tokens_per_step": r.tokens_per_step,
                            "throughput": r.throughput_tok_s,
                        }
                        for r in rows
                    ],
                    "throughput_unit": "tok/s" if timed else "relative",
                },
            )
        ]
    )
