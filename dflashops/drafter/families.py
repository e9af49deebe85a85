"""Drafter families: which checks a speculative method needs, and which family a drafter is.

A playbook names a method (``drafter.method``); each method belongs to one family whose rules
say what silently breaks acceptance for it (:mod:`dflashops.drafter.methods` holds one
validator per family). A drafter's own files say which family it is (:func:`detect_family`):
a good EAGLE-3 drafter must never be judged by the DFlash rules, and a playbook that names one
method for a drafter of another family is an error in itself.

Standard library only, like the rest of the validation core (the bundled server imports it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dflashops.drafter.engine import EngineSpec
from dflashops.drafter.family_names import FAMILIES, Family
from dflashops.drafter.files import DrafterFiles, TargetFiles
from dflashops.drafter.registry import RegistryEntry

__all__ = [
    "FAMILIES",
    "CheckInputs",
    "Family",
    "detect_family",
    "method_family",
    "weights_family",
]
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
    that family's loaders read (None: it does not say).

    - DSpark: an architecture naming DSpark, ``model_type`` ``dspark``/``glm5_dspark``, the
      speculators type ``dspark``, or the Markov head's ``markov_rank`` (SGLang's
      ``build_markov_head`` and vLLM's ``qwen3_dspark`` build the head from it; TorchSpec's
      DSpark configs keep the DFlash class name beside it).
    - DFlash2: ``DFlash2DraftModel`` (or another DFlash2 class vLLM registers), the speculators
      type ``dflash2``, or one of the fields only DFlash2's loaders read: z-lab's
      ``DFlash2DraftModel``/``CandidateSelector``, vLLM's ``qwen3_dflash2`` and SGLang's
      ``parse_dflash_draft_config`` take ``conv_kernel_size``, ``conv_group_size``,
      ``selector_rank`` and ``selector_top_k`` from ``dflash_config``.
    - DFlash: a DFlash class, the speculators type ``dflash``, or a ``dflash_config``."""
    architectures = config.get("architectures")
    names = [str(a) for a in architectures] if isinstance(architectures, list) else []
    kind = str(config.get("speculators_model_type") or "").lower()
    model_type = str(config.get("model_type") or "").lower()
    lowered = " ".join(names).lower()
    dflash = config.get("dflash_config")
    dflash_keys = dflash if isinstance(dflash, Mapping) else {}
    if (
        "dspark" in lowered
        or kind == "dspark"
        or model_type in DSPARK_MODEL_TYPES
        or any(key in config or key in dflash_keys for key in DSPARK_FIELDS)
    ):
        return "dspark"
    if (
        DFLASH2_ARCHITECTURES.intersection(names)
        or kind == "dflash2"
        or DFLASH2_FIELDS.intersection(dflash_keys)
    ):
        return "dflash2"
    if "dflash" in lowered or kind == "dflash" or isinstance(dflash, Mapping):
        return "dflash"
    if "eagle3" in lowered or kind == "eagle3":
        return "eagle3"
    if "eagle" in lowered or kind == "eagle":
        return "eagle"
    return None


def weights_family(tensor_names: Iterable[str]) -> Family | None:
    """The family a checkpoint's tensors say it is (None: plain DFlash or unknown).

    DFlash2 adds ``candidate_selector.*`` and per-layer ``attention_conv``/``mlp_conv`` modules
    (z-lab's ``dflash/model.py``, vLLM's ``qwen3_dflash2``); DSpark adds the Markov head's
    ``markov_w1`` (llama.cpp tells a DSpark GGUF by it)."""
    family: Family | None = None
    for name in tensor_names:
        if any(part in name for part in DSPARK_WEIGHT_PARTS):
            return "dspark"
        if any(part in name for part in DFLASH2_WEIGHT_PARTS):
            family = "dflash2"
    return family


# the DFlash2 classes vLLM 0.34 registers (model_executor/models/registry.py)
DFLASH2_ARCHITECTURES = frozenset(
    {
        "DFlash2DraftModel",
        "DFlash2BeamDraftModel",
        "DFlash2RicursiveDraftModel",
        "MiniMaxDFlash2DraftModel",
    }
)
# dflash_config fields only z-lab's second generation writes (its path selector over the top
# candidates and its dynamic depthwise convolutions): the engines switch the modules on by them
DFLASH2_FIELDS = frozenset(
    {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"}
)
DFLASH2_WEIGHT_PARTS = ("candidate_selector.", ".attention_conv.", ".mlp_conv.")
# the Markov head's keys (SGLang's build_markov_head, vLLM's Qwen3DSpark model)
DSPARK_FIELDS = frozenset({"markov_rank", "markov_head_type"})
DSPARK_MODEL_TYPES = frozenset({"dspark", "glm5_dspark"})
DSPARK_WEIGHT_PARTS = ("markov_w1",)
