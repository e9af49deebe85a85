"""DFlash (z-lab's first generation, and the speculators library's DFlash drafters): the rules
of :func:`dflashops.drafter.validate.validate_drafter`."""

from __future__ import annotations

from dflashops.drafter.families import CheckInputs
from dflashops.drafter.result import CheckResult
from dflashops.drafter.unchecked import no_files
from dflashops.drafter.validate import validate_drafter


def validate(inputs: CheckInputs) -> CheckResult:
    if inputs.drafter is None:
        return no_files("dflash")
    return validate_drafter(
        inputs.drafter, inputs.target, inputs.ref, engine=inputs.engine, k=inputs.k
    )
