"""The config against the checkpoint's safetensors header: fc width, layer count, shapes."""

from __future__ import annotations

import re
from collections.abc import Mapping

from dflashops.drafter.context import CheckContext, TargetFacts
from dflashops.drafter.families import weights_family
from dflashops.drafter.family_names import Family
from dflashops.drafter.keys import get_path, show
from dflashops.drafter.safetensors import TensorInfo

# a drafter layer's tensors, under any prefix the exporters use ("model.", "draft_model.", …)
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def drafter_layer_indices(tensors: Mapping[str, TensorInfo]) -> set[int]:
    """The drafter layer indices the safetensors header holds tensors for."""
    return {int(m.group(1)) for name in tensors if (m := _LAYER.search(name))}


def fc_weight(tensors: Mapping[str, TensorInfo]) -> TensorInfo | None:
    """``fc.weight`` (the projection of the concatenated target hidden states), any prefix."""
    return tensors.get("fc.weight") or next(
        (t for name, t in tensors.items() if name.endswith(".fc.weight")), None
    )


def check_weights(
    ctx: CheckContext,
    layers: int | None,
    hidden: int | None,
    ids: list[int] | None,
    facts: TargetFacts,
    *,
    family: Family = "dflash",
) -> None:
    weights = ctx.drafter.weights
    if weights is None:
        ctx.add(
            "info",
            "weights",
            "model.safetensors (or shards) next to config.json",
            "(none)",
            "Without the safetensors header the fc width, layer count and shapes are not "
            "checked against the config.",
            check="weights",
        )
        return
    tensors = weights.tensors
    if family == "dflash":
        _check_later_generation(ctx, tensors)
    if get_path(ctx.cfg, "dflash_config.use_aux_hidden_state") is not False:
        _check_fc(ctx, tensors, hidden, ids, facts)
    _check_layer_count(ctx, drafter_layer_indices(tensors), layers)
    _check_projections(ctx, tensors)


def _check_later_generation(ctx: CheckContext, tensors: Mapping[str, TensorInfo]) -> None:
    """Weights of a DFlash2 or DSpark drafter under a config that builds a DFlash one."""
    family = weights_family(tensors)
    if family is None:
        return
    module = (
        "a candidate selector and dynamic convolutions (DFlash2)"
        if family == "dflash2"
        else "a Markov head (DSpark)"
    )
    ctx.add(
        "error",
        "architectures",
        "DFlash2DraftModel with its dflash_config fields"
        if family == "dflash2"
        else "a DSpark class (Qwen3DSparkModel) with markov_rank",
        f"{show(ctx.cfg.get('architectures'))}, weights holding {module}",
        "The config says DFlash, so engines build the first-generation drafter: vLLM's "
        "qwen3_dflash has no module for these tensors, so the trained modules are left out (or "
        "the load fails on unexpected weights) and the drafter runs without them. Restore the "
        f"config the checkpoint was published with ({family}).",
        check="weights",
    )


def _check_layer_count(ctx: CheckContext, found: set[int], layers: int | None) -> None:
    """``num_hidden_layers`` against the layers the header holds (0..n-1, none missing)."""
    if not found or layers is None:
        return
    count = max(found) + 1
    # a hostile header ("layers.999999999.…") must not make a billion-element set
    gaps = sorted(set(range(count)) - found) if count <= 4 * len(found) + 4096 else []
    if count == layers and not gaps:
        return
    held = f"{len(found)} (layers 0..{count - 1} in the checkpoint" + (
        f", missing {gaps[:4]})" if gaps else ")"
    )
    ctx.add(
        "error",
        "num_hidden_layers",
        held,
        str(layers),
        "The config and the weights disagree on the drafter's layers: engines build "
        "num_hidden_layers layers, so layers the weights lack stay randomly initialised and "
        "layers the config leaves out are dropped; either way the drafter is not the one "
        "that was trained.",
        check="weights",
    )


def _check_fc(
    ctx: CheckContext,
    tensors: Mapping[str, TensorInfo],
    hidden: int | None,
    ids: list[int] | None,
    facts: TargetFacts,
) -> None:
    fc = fc_weight(tensors)
    if fc is None or len(fc.shape) != 2:
        ctx.add(
            "error",
            "fc.weight",
            "[hidden_size, len(target_layer_ids) × target hidden]",
            "(missing)" if fc is None else show(list(fc.shape)),
            "DFlash projects the concatenated target hidden states through fc; a checkpoint "
            "without a 2-D fc.weight is not a DFlash drafter.",
            check="weights",
        )
        return
    rows, cols = fc.shape
    if hidden is not None and rows != hidden:
        ctx.add(
            "error",
            "fc.weight",
            f"[{hidden}, …] (hidden_size)",
            show(list(fc.shape)),
            "fc projects into the drafter's hidden size; the config names another.",
            check="weights",
        )
    width = facts.hidden
    if ids is None or width is None or cols == len(ids) * width:
        return
    trained = (
        f" these weights were trained on {cols // width} target layers;"
        if cols % width == 0
        else ""
    )
    ctx.add(
        "error",
        "fc.weight",
        f"[…, {len(ids) * width}] = {len(ids)} ids × {width} ({facts.hidden_from})",
        show(list(fc.shape)),
        f"fc's width fixes how many target layers the checkpoint reads:{trained} vLLM 0.34 "
        "refuses ('DFlash drafter expects N concatenated aux hidden features'), older versions "
        "fail or draft garbage.",
        check="weights",
    )


def _check_projections(ctx: CheckContext, tensors: Mapping[str, TensorInfo]) -> None:
    """Head counts and MLP width from layer 0's projections (every layer has the same)."""

    def rows(name: str) -> int | None:
        t = tensors.get(name) or tensors.get(f"model.{name}")
        return t.shape[0] if t is not None and len(t.shape) == 2 else None

    head_dim = ctx.config_int_quiet("head_dim")
    checks = (
        ("num_attention_heads", "layers.0.self_attn.q_proj.weight", head_dim),
        ("num_key_value_heads", "layers.0.self_attn.k_proj.weight", head_dim),
        ("intermediate_size", "layers.0.mlp.gate_proj.weight", 1),
    )
    for key, tensor, factor in checks:
        have, count = rows(tensor), ctx.config_int_quiet(key)
        if have is None or count is None or factor is None or have == count * factor:
            continue
        times = "" if factor == 1 else f" × head_dim {factor}"
        ctx.add(
            "error",
            key,
            f"{have / factor:g}{times} = {have} rows of {tensor}",
            f"{count}{times}",
            "The config does not describe these weights: loading fails on shapes, or the layers "
            "run with the wrong geometry.",
            check="weights",
        )
