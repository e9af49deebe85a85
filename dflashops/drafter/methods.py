"""The validator of each drafter family, and the one entry point that picks it.

:func:`validate_method` is what ``drafter check``, ``launch``, ``up``'s drafter step,
``compare``, ``doctor`` and the bundled server's preflight run: the rules of the family the
playbook's method names, plus one rule of its own: a drafter whose files say it belongs to
another family than the method is an error (the engine would build the method's model from a
checkpoint made for another one).

Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from dflashops.drafter import (
    family_dflash,
    family_dflash2,
    family_draft_model,
    family_dspark,
    family_eagle,
    family_lookup,
    family_mtp,
)
from dflashops.drafter.families import (
    CHECKPOINT_FAMILIES,
    CheckInputs,
    Family,
    detect_family,
)
from dflashops.drafter.result import CheckResult, Finding, merge_by_key

Validator = Callable[[CheckInputs], CheckResult]
VALIDATORS: Mapping[Family, Validator] = {
    "dflash": family_dflash.validate,
    "dflash2": family_dflash2.validate,
    "dspark": family_dspark.validate,
    "eagle3": family_eagle.validate_eagle3,
    "eagle": family_eagle.validate_eagle,
    "mtp": family_mtp.validate,
    "draft_model": family_draft_model.validate,
    "ngram": family_lookup.validate_ngram,
    "suffix": family_lookup.validate_suffix,
}


def family_for(method_family: Family | None, inputs: CheckInputs) -> Family:
    """The family whose rules apply: the method's; without one (``drafter check`` with no
    ``--method``), the one the drafter's files say, else DFlash (dflashops' first family).
    DFlash2 is served as ``dflash``: its files decide between the generations."""
    detected = detect_family(inputs.drafter.config) if inputs.drafter is not None else None
    if method_family is None:
        # the files, else the matched reference's family (SafeAILab's EAGLE configs name only
        # LlamaForCausalLM), else DFlash
        return detected or (inputs.ref.family if inputs.ref is not None else "dflash")
    if method_family == "dflash" and detected == "dflash2":
        return "dflash2"
    return method_family


def validate_method(method_family: Family | None, inputs: CheckInputs) -> CheckResult:
    """Run the rules of the family that applies (:func:`family_for`) on ``inputs``."""
    family = family_for(method_family, inputs)
    result = VALIDATORS[family](inputs)
    mismatch = _family_mismatch(family, inputs)
    if mismatch is None:
        return result
    # one row per key: the mismatch and a family rule may both name ``architectures``
    return CheckResult.of(merge_by_key([mismatch, *result.findings]), result.required_env)


def _family_mismatch(family: Family, inputs: CheckInputs) -> Finding | None:
    """A checkpoint whose config says it is another family's drafter."""
    if inputs.drafter is None or family not in CHECKPOINT_FAMILIES or family == "draft_model":
        return None
    detected = detect_family(inputs.drafter.config)
    if detected is None or detected == family:
        return None
    return Finding(
        "error",
        "architectures",
        f"a {family} drafter (the method served)",
        f"a {detected} drafter ({inputs.drafter.config.get('architectures')})",
        f"The engine builds a {family} drafter from this checkpoint: another family's weights "
        "and config load wrongly or not at all. Serve it with its own method, or use a "
        f"{family} drafter.",
        "family",
    )
