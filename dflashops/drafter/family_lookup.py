"""n-gram (prompt lookup) and suffix decoding: the rules of
:mod:`dflashops.drafter.checks_lookup` on the method's parameters (``CheckInputs.params``, named
as vLLM's ``--speculative-config`` names them) and the engine release."""

from __future__ import annotations

from dflashops.drafter.checks_lookup import ngram_findings, suffix_findings
from dflashops.drafter.families import CheckInputs
from dflashops.drafter.result import CheckResult, merge_by_key


def validate_ngram(inputs: CheckInputs) -> CheckResult:
    findings = ngram_findings(inputs.params, inputs.engine, inputs.drafter is not None)
    return CheckResult.of(merge_by_key(findings), {})


def validate_suffix(inputs: CheckInputs) -> CheckResult:
    findings = suffix_findings(inputs.params, inputs.engine, inputs.k, inputs.drafter is not None)
    return CheckResult.of(merge_by_key(findings), {})
