"""DSpark: a DFlash backbone plus a low-rank Markov head over the previous token, in a flat config.

DSpark checkpoints keep the keys DFlash nests in ``dflash_config`` at the top level
(TorchSpec's ``glm52_dspark_draft_config.json``, vLLM's dense ``Qwen3DSparkModel`` configs) or in
the speculators layout (``speculators_model_type: dspark``, ``aux_hidden_state_layer_ids`` = ids
+ 1). The engines read them there:

- the mask id: ``dflash_config.mask_token_id``, else ``mask_token_id``, else
  ``dspark_noise_token_id`` (vLLM ``v1/worker/gpu/spec_decode/utils.py``,
  ``get_parallel_drafting_token_id``; SGLang ``parse_dflash_draft_config`` from 0.5.18);
- the target layers: ``dflash_config.target_layer_ids``, else ``target_layer_ids`` (SGLang
  ``parse_dflash_draft_config``; vLLM ``get_eagle3_aux_layers_from_config`` adds 1);
- the Markov head: ``markov_rank`` > 0 and ``markov_head_type`` in vanilla/gated/rnn (SGLang
  ``models/dspark.py``, ``build_markov_head``, raises ``ValueError`` otherwise).

:func:`dspark_view` builds the nested layout the DFlash rules read, and :func:`dspark_key` names
each finding where the file holds the key. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dflashops.drafter.context import CheckContext
from dflashops.drafter.formats import AUX_IDS, LAYER_CONFIG
from dflashops.drafter.keys import MISSING, is_int, show

# the DSpark classes SGLang 0.5.23 (models/dspark.py EntryClass) and vLLM 0.34 build
DSPARK_CLASSES = frozenset(
    {"Qwen3DSparkModel", "DSparkDraftModel", "LingDSparkModel", "Qwen3OmniDSparkModel"}
)
MARKOV_TYPES = ("vanilla", "gated", "rnn")
SPECULATORS_DSPARK = "dspark"
# z-lab names of the keys DSpark engines also read at the top level
NESTED = {
    "dflash_config.mask_token_id": "mask_token_id",
    "dflash_config.target_layer_ids": "target_layer_ids",
}
IDS_READ_AS = f"{AUX_IDS} (read as target_layer_ids = id - 1)"


def _speculators(config: Mapping[str, Any]) -> bool:
    return config.get("speculators_model_type") == SPECULATORS_DSPARK


def dspark_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with the mask id and target layers in ``dflash_config`` as the engines resolve
    them (nested first, then the top level), and a speculators file's layer config unfolded."""
    view: dict[str, Any] = dict(config)
    if _speculators(config):
        layer = config.get(LAYER_CONFIG)
        view = {**(dict(layer) if isinstance(layer, Mapping) else {}), **view}
        view.pop("speculators_model_type", None)
        aux = config.get(AUX_IDS, MISSING)
        if isinstance(aux, list) and all(is_int(i) for i in aux):
            view["target_layer_ids"] = [int(i) - 1 for i in aux]
        elif aux is not MISSING:
            view["target_layer_ids"] = aux
    nested = config.get("dflash_config", MISSING)
    if nested is not MISSING and not isinstance(nested, Mapping):
        return view  # a dflash_config of another type is named by the DFlash rules
    dflash = dict(nested) if isinstance(nested, Mapping) else {}
    for path, top in NESTED.items():
        field = path.removeprefix("dflash_config.")
        if field not in dflash and top in view:
            dflash[field] = view[top]
    view["dflash_config"] = dflash
    return view


def mask_top_level(config: Mapping[str, Any]) -> bool:
    """Whether the mask id is only at the top level (SGLang before 0.5.18 does not look there)."""
    nested = config.get("dflash_config")
    in_nested = isinstance(nested, Mapping) and "mask_token_id" in nested
    return not in_nested and "mask_token_id" in config


def dspark_key(key: str, config: Mapping[str, Any]) -> str:
    """Where the file holds what a DFlash rule calls ``key``."""
    top = NESTED.get(key)
    nested = config.get("dflash_config")
    in_nested = isinstance(nested, Mapping) and key.removeprefix("dflash_config.") in nested
    if top is not None and not in_nested:
        if top == "target_layer_ids" and _speculators(config) and AUX_IDS in config:
            return IDS_READ_AS
        return top
    if key == "dflash_config":
        return key
    if _speculators(config) and "." not in key and key not in config:
        layer = config.get(LAYER_CONFIG)
        if isinstance(layer, Mapping) and key in layer:
            return f"{LAYER_CONFIG}.{key}"
    return key


def check_dspark_architecture(ctx: CheckContext) -> None:
    arch = ctx.cfg.get("architectures", MISSING)
    names = set(arch) if isinstance(arch, list) and all(isinstance(a, str) for a in arch) else None
    expected = '["Qwen3DSparkModel"] (or DSparkDraftModel)'
    if names is not None and names & DSPARK_CLASSES:
        if "DSparkDraftModel" in names and ctx.cfg.get("model_type") != "qwen3":
            ctx.add(
                "warning",
                "architectures",
                expected,
                f"{show(arch)} with model_type {show(ctx.cfg.get('model_type', MISSING))}",
                "SGLang (0.5.17+) builds DSparkDraftModel as a Qwen3-layer DSpark drafter, but "
                "vLLM takes that name for DeepSeek-V4's DSpark stages (0.34 maps it to "
                'Qwen3DSparkModel only with model_type "qwen3"): on vLLM it loads as another '
                "model. Qwen3DSparkModel runs on both.",
                check="config",
            )
        return
    dspark_like = names is not None and any("dspark" in n.lower() for n in names)
    ctx.add(
        "warning" if dspark_like else "error",
        "architectures",
        expected,
        show(arch),
        "Engines pick the DSpark class from architectures: another DSpark class belongs to "
        "another target family (DeepSeek-V4, Gemma 4, MiniMax) and a DFlash class builds no "
        "Markov head, so the checkpoint's head is left out and the drafter drafts without it.",
        check="config",
    )


def check_dspark(ctx: CheckContext) -> None:
    """The Markov head: its rank and type, and its weights against them."""
    rank = ctx.cfg.get("markov_rank", MISSING)
    if not is_int(rank) or rank < 1:
        ctx.add(
            "error",
            "markov_rank",
            "a positive integer (256 in TorchSpec's and speculators' DSpark configs)",
            show(rank),
            "The Markov head is the core of DSpark's semi-autoregressive draft: SGLang refuses "
            "a drafter without markov_rank > 0 (build_markov_head) and vLLM's Qwen3 DSpark "
            "model builds the head from it.",
            check="config",
        )
        rank = None
    head = ctx.cfg.get("markov_head_type", MISSING)
    if head is not MISSING and (not isinstance(head, str) or head.lower() not in MARKOV_TYPES):
        ctx.add(
            "error",
            "markov_head_type",
            " or ".join(MARKOV_TYPES),
            show(head),
            f"SGLang builds only these Markov heads and raises ValueError "
            f'("Unsupported DSpark markov_head_type") for any other ({", ".join(MARKOV_TYPES)}).',
            check="config",
        )
    weights = ctx.drafter.weights
    if weights is None or rank is None:
        return
    w1 = next((t for n, t in weights.tensors.items() if n.endswith("markov_w1.weight")), None)
    if w1 is None or len(w1.shape) != 2:
        return
    if w1.shape[1] != rank:
        ctx.add(
            "error",
            "markov_rank",
            f"{w1.shape[1]} (markov_w1.weight {show(list(w1.shape))})",
            str(rank),
            "The Markov head's weights were trained at another rank than the config says: "
            "loading fails on the shape.",
            check="weights",
        )
