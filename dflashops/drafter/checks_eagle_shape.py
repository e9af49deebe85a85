"""An EAGLE drafter's widths against its target and its own weights.

- EAGLE-3 (vLLM's llama_eagle3.py / qwen3_eagle3.py, 0.32 and 0.34): every captured target
  state is ``target_hidden_size`` wide (default: the drafter's ``hidden_size``), so that must be
  the target's; the first layer attends over ``[embeddings, fc output]`` (``2 * hidden_size``).
  A drafter without its own ``embed_tokens`` (SpecForge exports none) shares the target's,
  which vLLM does only when the widths match (``_maybe_share_embeddings`` in
  vllm/v1/spec_decode/llm_base_proposer.py); otherwise it keeps its own, never loaded.
- EAGLE (llama_eagle.py): ``fc`` takes ``[embeddings, target hidden state]`` (``2 * hidden_size``)
  with no bias, so the drafter's hidden size is the target's.
- Both: the decoder layers the config names are the ones the weights hold (``midlayer.`` is
  layer 0: the ``hf_to_vllm_mapper`` of llama_eagle3.py), and the head counts are the
  projections' rows.

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from dflashops.drafter.checks_eagle_layout import EagleFile, EagleTarget
from dflashops.drafter.context import CheckContext
from dflashops.drafter.keys import show
from dflashops.drafter.safetensors import TensorInfo

_LAYER = re.compile(r"(?:^|\.)(?:layers\.(\d+)|midlayer)\.")


def check_hidden(
    ctx: CheckContext,
    cfg: EagleFile,
    target: EagleTarget,
    tensors: Mapping[str, TensorInfo] | None,
    *,
    eagle3: bool,
) -> int | None:
    """The drafter's hidden size, against the target's."""
    key = cfg.layer_key("hidden_size")
    hidden = ctx.config_int(
        key,
        missing="error",
        why_missing="Without it transformers' LlamaConfig assumes 4096; the drafter reads the "
        "target's hidden states.",
    )
    t_hidden = target.hidden
    if hidden is None or t_hidden is None:
        return hidden
    if not eagle3:
        if hidden != t_hidden:
            ctx.add(
                "error",
                key,
                f"{t_hidden} ({target.hidden_from})",
                str(hidden),
                "vLLM's EAGLE drafter concatenates the token embedding with the target's hidden "
                "state into fc (2 * hidden_size wide, llama_eagle.py): another hidden size "
                "fails on shapes or means a drafter for another model.",
                check="target",
            )
        return hidden
    declared = cfg.top_int("target_hidden_size")
    reads = declared or hidden
    if reads != t_hidden:
        where = "target_hidden_size" if declared else key
        ctx.add(
            "error",
            where,
            f"{t_hidden} ({target.hidden_from})",
            str(reads),
            "vLLM sizes fc for captured target states of target_hidden_size (default: "
            "hidden_size) each (llama_eagle3.py); the target produces another width, so the "
            "first draft step fails on shapes, or this drafter is for another model.",
            check="target",
        )
    elif hidden != t_hidden and tensors is not None and not _has(tensors, "embed_tokens.weight"):
        ctx.add(
            "error",
            key,
            f"{t_hidden}, or its own embed_tokens in the weights",
            str(hidden),
            "A drafter without embeddings borrows the target's, which vLLM shares only when the "
            "widths match (_maybe_share_embeddings, vllm/v1/spec_decode/llm_base_proposer.py); "
            "here it keeps its own, never loaded: every draft starts from random embeddings.",
            check="target",
        )
    return hidden


def _has(tensors: Mapping[str, TensorInfo], name: str) -> bool:
    return name in tensors or f"model.{name}" in tensors


def layer_indices(tensors: Mapping[str, TensorInfo]) -> set[int]:
    """The decoder layers the weights hold (``midlayer.`` is layer 0)."""
    found: set[int] = set()
    for name in tensors:
        match = _LAYER.search(name)
        if match is not None:
            found.add(int(match.group(1)) if match.group(1) is not None else 0)
    return found


def check_layers_and_heads(
    ctx: CheckContext,
    cfg: EagleFile,
    tensors: Mapping[str, TensorInfo],
    hidden: int | None,
    *,
    eagle3: bool,
) -> None:
    key = cfg.layer_key("num_hidden_layers")
    layers = ctx.config_int(
        key,
        missing="error",
        why_missing="Without it transformers' LlamaConfig builds 32 layers, not the checkpoint's.",
    )
    found = layer_indices(tensors)
    if found and layers is not None and (max(found) + 1 != layers or len(found) != layers):
        ctx.add(
            "error",
            key,
            f"{len(found)} (the decoder layers the weights hold)",
            str(layers),
            "vLLM builds num_hidden_layers draft layers: layers the weights lack stay randomly "
            "initialised, layers the config leaves out fail to load.",
            check="weights",
        )
    _check_projections(ctx, cfg, tensors, hidden, eagle3=eagle3)


def _first_layer(tensors: Mapping[str, TensorInfo], proj: str) -> TensorInfo | None:
    for prefix in ("midlayer", "layers.0", "model.layers.0", "model.midlayer"):
        tensor = tensors.get(f"{prefix}.self_attn.{proj}.weight")
        if tensor is not None and len(tensor.shape) == 2:
            return tensor
    return None


def _check_projections(
    ctx: CheckContext,
    cfg: EagleFile,
    tensors: Mapping[str, TensorInfo],
    hidden: int | None,
    *,
    eagle3: bool,
) -> None:
    """Head counts and head_dim from the first layer's q/k projections; EAGLE-3's first layer
    reads the embeddings and the fc output side by side."""
    heads, kv = cfg.layer_int("num_attention_heads"), cfg.layer_int("num_key_value_heads")
    head_dim = cfg.layer_int("head_dim") or (hidden // heads if hidden and heads else None)
    for proj, count, label in (
        ("q_proj", heads, "num_attention_heads"),
        ("k_proj", kv, "num_key_value_heads"),
    ):
        tensor = _first_layer(tensors, proj)
        if tensor is None or count is None or head_dim is None:
            continue
        rows, cols = tensor.shape
        if rows != count * head_dim:
            # q_proj decides between its head count and head_dim; once it fits, k_proj's
            # mismatch can only be the key/value head count
            explicit = cfg.layer_int("head_dim") is not None
            blame = "head_dim" if proj == "q_proj" and explicit and rows % count == 0 else label
            key = cfg.layer_key(blame)
            ctx.add(
                "error",
                key,
                f"{rows} rows of the first layer's {proj} = {count} heads × {rows / count:g}",
                f"{count} heads × head_dim {head_dim}",
                "The config does not describe these weights: vLLM builds the attention from "
                "the head counts and head_dim, so loading fails on shapes.",
                check="weights",
            )
            return
        width = 2 * hidden if eagle3 and hidden else hidden
        if width is not None and cols != width:
            ctx.add(
                "error",
                tensor.name,
                f"[…, {width}] ({'2 × ' if eagle3 else ''}hidden_size)",
                show(list(tensor.shape)),
                "vLLM's EAGLE-3 first layer attends over the token embedding and the fc output "
                "side by side (llama_eagle3.py): these weights were made for another width."
                if eagle3
                else "The first layer's projections read hidden_size wide states.",
                check="weights",
            )
            return


def check_eagle_fc(
    ctx: CheckContext, tensors: Mapping[str, TensorInfo], hidden: int | None
) -> None:
    """EAGLE's fc: ``[hidden_size, 2 * hidden_size]`` and no bias (llama_eagle.py builds a
    bias-free ReplicatedLinear, so a bias in the weights has nowhere to load)."""
    fc = tensors.get("fc.weight") or tensors.get("model.fc.weight")
    if fc is not None and hidden is not None and list(fc.shape) != [hidden, 2 * hidden]:
        ctx.add(
            "error",
            "fc.weight",
            f"[{hidden}, {2 * hidden}] (hidden_size, 2 × hidden_size)",
            show(list(fc.shape)),
            "vLLM's EAGLE drafter projects [token embedding, target hidden state] through fc "
            "(llama_eagle.py): these weights do not fit and fail to load.",
            check="weights",
        )
    if _has(tensors, "fc.bias"):
        ctx.add(
            "error",
            "fc.bias",
            "(none: vLLM's EAGLE fc has no bias)",
            "present in the weights",
            "vLLM builds fc without a bias (llama_eagle.py), so loading a checkpoint trained "
            "with one fails ('There is no module or parameter named ...'); EAGLE's own code "
            "trains with a bias unless the config says bias: false.",
            check="weights",
        )
