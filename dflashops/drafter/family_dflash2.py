"""DFlash2 (z-lab's second generation: a candidate selector over the target head's top tokens and
dynamic depthwise convolutions around each drafter layer's attention and MLP): DFlash's rules
with DFlash2's class, ``dflash_config`` fields, modules and engine versions
(:mod:`dflashops.drafter.checks_dflash2`, :mod:`dflashops.drafter.engine`)."""

from __future__ import annotations

from dflashops.drafter.families import CheckInputs
from dflashops.drafter.result import CheckResult
from dflashops.drafter.unchecked import no_files
from dflashops.drafter.validate import validate_drafter


def validate(inputs: CheckInputs) -> CheckResult:
    if inputs.drafter is None:
        return no_files("dflash2")
    return validate_drafter(
        inputs.drafter,
        inputs.target,
        inputs.ref,
        engine=inputs.engine,
        k=inputs.k,
        family="dflash2",
    )
