"""The EAGLE and EAGLE-3 families' rules (to be written)."""

from __future__ import annotations

from dflashops.drafter.families import CheckInputs
from dflashops.drafter.result import CheckResult
from dflashops.drafter.unchecked import not_checked


def validate_eagle3(inputs: CheckInputs) -> CheckResult:
    return not_checked("eagle3")


def validate_eagle(inputs: CheckInputs) -> CheckResult:
    return not_checked("eagle")
