"""The dspark family's rules (to be written)."""

from __future__ import annotations

from dflashops.drafter.families import CheckInputs
from dflashops.drafter.result import CheckResult
from dflashops.drafter.unchecked import not_checked


def validate(inputs: CheckInputs) -> CheckResult:
    return not_checked("dspark")
