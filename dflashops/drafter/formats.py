"""The two layouts a DFlash drafter config comes in, and the one view the checks read.

- **z-lab** (the published drafters): a Qwen3 config at the top level, plus
  ``dflash_config.{target_layer_ids, mask_token_id}`` and ``block_size``.
- **speculators** (what vLLM's training library, ``speculators``, exports):
  ``speculators_model_type: dflash``, the Qwen3 layer config nested under
  ``transformer_layer_config``, and at the top level ``aux_hidden_state_layer_ids`` (the target
  layer ids + 1: hidden state 0 is the embeddings), ``mask_token_id``, ``block_size``,
  ``sample_from_anchor`` and ``sliding_window_non_causal``.

vLLM (0.32) loads the speculators layout by building the z-lab one from it (its speculators
config adapter, ``update_dflash``): the layer config, ``architectures: [DFlashDraftModel]``, and
``dflash_config`` with ``target_layer_ids = [i - 1 for i in aux_hidden_state_layer_ids]``,
``mask_token_id``, ``sample_from_anchor`` and ``causal = not sliding_window_non_causal``.
:func:`checked_view` builds the same, so every check reads one layout; :func:`file_key` names a
finding's key where the file holds it. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from dflashops.drafter.keys import MISSING, is_int

Format = Literal["z-lab", "speculators"]
ZLAB: Format = "z-lab"
SPECULATORS: Format = "speculators"
LAYER_CONFIG = "transformer_layer_config"
AUX_IDS = "aux_hidden_state_layer_ids"
# z-lab keys the speculators layout keeps at its own top level, under another name or not
_TOP_LEVEL = {
    "dflash_config.mask_token_id": "mask_token_id",
    "dflash_config.sample_from_anchor": "sample_from_anchor",
    "dflash_config.causal": "sliding_window_non_causal",
    "dflash_config.block_size": "block_size",
    "block_size": "block_size",
    "draft_vocab_size": "draft_vocab_size",
    "target_hidden_size": "target_hidden_size",
    "architectures": "architectures",
}


# z-lab keys the speculators layout has no place for, because it never needs them:
# num_target_layers only feeds z-lab's fallback spread of target_layer_ids, which the speculators
# layout always states (vLLM requires aux_hidden_state_layer_ids)
ZLAB_ONLY = frozenset({"num_target_layers"})


def config_format(config: Mapping[str, Any]) -> Format:
    """Which layout ``config`` is in (speculators marks its own with ``speculators_model_type``)."""
    return SPECULATORS if config.get("speculators_model_type") == "dflash" else ZLAB


def checked_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """The z-lab layout of ``config``, as the engine builds it (a z-lab config as it is).

    Values of the wrong type are carried over unchanged, so the checks name them."""
    if config_format(config) == ZLAB:
        return dict(config)
    layer = config.get(LAYER_CONFIG)
    view: dict[str, Any] = dict(layer) if isinstance(layer, Mapping) else {}
    view["architectures"] = ["DFlashDraftModel"]
    for key in ("draft_vocab_size", "target_hidden_size", "block_size"):
        if config.get(key) is not None:
            view[key] = config[key]
    dflash: dict[str, Any] = {
        "sample_from_anchor": config.get("sample_from_anchor", False),
        "causal": not config.get("sliding_window_non_causal", True),
    }
    if "mask_token_id" in config:
        dflash["mask_token_id"] = config["mask_token_id"]
    aux = config.get(AUX_IDS, MISSING)
    if isinstance(aux, list) and all(is_int(i) for i in aux):
        dflash["target_layer_ids"] = [int(i) - 1 for i in aux]
    elif aux is not MISSING:
        dflash["target_layer_ids"] = aux
    view["dflash_config"] = dflash
    return view


def speculators_place(key: str, value: Any) -> tuple[str, Any] | None:
    """Where a speculators-layout file holds what the engine reads as z-lab ``key``, and the value
    it holds there; None where the layout has no place for it (the engine derives it)."""
    if key in ZLAB_ONLY or key == "architectures":
        return None  # vLLM sets DFlashDraftModel itself; the file names speculators' own class
    if key == "dflash_config.target_layer_ids":
        if not (isinstance(value, list) and all(is_int(i) for i in value)):
            return None
        return AUX_IDS, [int(i) + 1 for i in value]
    if key in _TOP_LEVEL:
        return _TOP_LEVEL[key], value
    if "." in key:
        return None
    return f"{LAYER_CONFIG}.{key}", value


def file_key(key: str, config: Mapping[str, Any]) -> str:
    """Where the file holds the value a check calls ``key`` (its z-lab name)."""
    if config_format(config) == ZLAB:
        return key
    if key == "dflash_config.target_layer_ids":
        return f"{AUX_IDS} (read as target_layer_ids = id - 1)"
    if key in _TOP_LEVEL:
        return _TOP_LEVEL[key]
    if key.split(".", 1)[0] in {"target", "weights", "fc", "num_speculative_tokens", "engine"}:
        return key  # facts of the target, the weights or the run, not of this file
    if "." in key.split("[", 1)[0] and not key.startswith(f"{LAYER_CONFIG}."):
        return key  # a key the speculators layout has no place for: named as checked
    return f"{LAYER_CONFIG}.{key}"
