"""n-gram (prompt lookup) and suffix decoding: their parameters (to be written)."""

from __future__ import annotations

from dflashops.drafter.families import CheckInputs
from dflashops.drafter.result import CheckResult
from dflashops.drafter.unchecked import not_checked


def validate_ngram(inputs: CheckInputs) -> CheckResult:
    return not_checked("ngram")


def validate_suffix(inputs: CheckInputs) -> CheckResult:
    return not_checked("suffix")
