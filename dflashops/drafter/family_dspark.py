"""DSpark (a DFlash backbone with a low-rank Markov head, its keys at the top level of a flat
config): DFlash's rules read where DSpark's engines read them, with DSpark's class, Markov head
and engine versions (:mod:`dflashops.drafter.checks_dspark`, :mod:`dflashops.drafter.engine`)."""

from __future__ import annotations

from dflashops.drafter.families import CheckInputs
from dflashops.drafter.result import CheckResult
from dflashops.drafter.unchecked import no_files
from dflashops.drafter.validate import validate_drafter


def validate(inputs: CheckInputs) -> CheckResult:
    if inputs.drafter is None:
        return no_files("dspark")
    return validate_drafter(
        inputs.drafter,
        inputs.target,
        inputs.ref,
        engine=inputs.engine,
        k=inputs.k,
        family="dspark",
    )
