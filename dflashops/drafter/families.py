"""Drafter families: which checks a speculative method needs, and which family a drafter is.

A playbook names a method (``drafter.method``); each method belongs to one family whose rules
say what silently breaks acceptance for it (:mod:`dflashops.drafter.methods` holds one
validator per family). A drafter's own files say which family it is (:func:`detect_family`):
a good EAGLE-3 drafter must never be judged by the DFlash rules, and a playbook that names one
method for a drafter of another family is an error in itself.

Standard library only, like the rest of the validation core (the bundled server imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dflashops.drafter.engine import EngineSpec
from dflashops.drafter.family_names import FAMILIES, Family
from dflashops.drafter.files import DrafterFiles, TargetFiles
from dflashops.drafter.registry import RegistryEntry

__all__ = ["FAMILIES", "CheckInputs", "Family", "detect_family", "method_family"]
# families whose drafter is a checkpoint of its own (MTP drafts with the target's own layers;
# n-gram and suffix decoding with none)
CHECKPOINT_FAMILIES = frozenset({"dflash", "dflash2", "dspark", "eagle3", "eagle", "draft_model"})
# the method a playbook names -> the family whose rules apply (DFlash2 is served as "dflash":
# the engine tells the generations apart by the config, and so does detect_family)
METHOD_FAMILY: Mapping[str, Family] = {
    "dflash": "dflash",
    "dspark": "dspark",
    "eagle3": "eagle3",
    "eagle": "eagle",
    "mtp": "mtp",
    "draft_model": "draft_model",
    "ngram": "ngram",
    "suffix": "suffix",
}


@dataclass(frozen=True)
class CheckInputs:
    """What a family's validator is given: the drafter's files (None where the method has none),
    the target's, the reference entry, the engine version, k and the method's own parameters
    (``prompt_lookup_min``/``max`` for n-gram, the suffix tree's depth and factor)."""

    drafter: DrafterFiles | None
    target: TargetFiles | None = None
    ref: RegistryEntry | None = None
    engine: EngineSpec | None = None
    k: int | None = None
    params: Mapping[str, Any] = field(default_factory=dict)


def method_family(method: str) -> Family | None:
    """The family whose rules apply to ``method`` (None: ``none``, or a method dflashops has no
    rules for)."""
    return METHOD_FAMILY.get(method)


def detect_family(config: Mapping[str, Any]) -> Family | None:
    """The family a drafter ``config.json`` says it is, from its architecture and the keys only
    that family's loaders read (None: it does not say)."""
    architectures = config.get("architectures")
    names = [str(a) for a in architectures] if isinstance(architectures, list) else []
    kind = str(config.get("speculators_model_type") or "").lower()
    lowered = " ".join(names).lower()
    if "dspark" in lowered or kind == "dspark":
        return "dspark"
    dflash = config.get("dflash_config")
    if isinstance(dflash, Mapping) and _dflash2(dflash):
        return "dflash2"
    if "dflash" in lowered or kind == "dflash" or isinstance(dflash, Mapping):
        return "dflash"
    if "eagle3" in lowered or kind == "eagle3":
        return "eagle3"
    if "eagle" in lowered or kind == "eagle":
        return "eagle"
    return None


# dflash_config fields only z-lab's second generation writes (its path selector over the top
# candidates and its dynamic depthwise convolutions); the DFlash2 validator owns the list
DFLASH2_FIELDS = frozenset({"num_paths", "path_selector", "conv_kernel_size", "dynamic_conv"})


def _dflash2(dflash_config: Mapping[str, Any]) -> bool:
    return bool(DFLASH2_FIELDS.intersection(dflash_config)) or dflash_config.get("version") == 2
