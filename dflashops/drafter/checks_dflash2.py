"""DFlash2's own keys and modules: the candidate selector and the dynamic convolutions.

z-lab's second generation (``DFlash2DraftModel`` in z-lab/dflash ``dflash/model.py``) keeps the
DFlash backbone and adds, per drafter layer, a grouped dynamic causal convolution around the
attention and the MLP (``attention_conv``/``mlp_conv``: ``base_kernel`` ``[2, kernel, hidden]``,
``kernel_projection`` ``hidden -> 2 * kernel * hidden / group``) and a candidate selector over
the target head's top ``selector_top_k`` tokens (``hidden_projection`` ``hidden -> rank`` and two
``[vocab, rank]`` codebooks). Four ``dflash_config`` fields size them:

- vLLM's ``qwen3_dflash2.py`` (0.28-0.34) indexes ``dflash_config["conv_kernel_size"]``,
  ``["conv_group_size"]``, ``["selector_rank"]`` and ``["selector_top_k"]`` (a missing one is a
  ``KeyError``) and raises ``ValueError`` when ``conv_group_size`` does not divide
  ``hidden_size``;
- SGLang's ``parse_dflash_draft_config`` (0.5.19-0.5.23) reads them from ``dflash_config`` only,
  refuses a kernel without a group size (or a rank without a top-k), and its
  ``DFlash2DraftModel`` requires ``selector_rank``.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dflashops.drafter.context import CheckContext
from dflashops.drafter.formats import checked_view, file_key
from dflashops.drafter.keys import MISSING, get_path, is_int, show
from dflashops.drafter.safetensors import TensorInfo

DFLASH2_ARCH = "DFlash2DraftModel"
# DFlash2 classes vLLM 0.34 also registers (a beam search and a NoPE variant, MiniMax's)
OTHER_DFLASH2_ARCHS = frozenset(
    {"DFlash2BeamDraftModel", "DFlash2RicursiveDraftModel", "MiniMaxDFlash2DraftModel"}
)
FIELDS = ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k")
_SOURCE = "vLLM qwen3_dflash2.py, SGLang dflash_utils.py"
SELECTOR = "candidate_selector"


def check_dflash2_architecture(ctx: CheckContext) -> None:
    arch = ctx.cfg.get("architectures", MISSING)
    names = set(arch) if isinstance(arch, list) and all(isinstance(a, str) for a in arch) else None
    if names is not None and DFLASH2_ARCH in names:
        return
    expected = f'["{DFLASH2_ARCH}"]'
    if names is not None and OTHER_DFLASH2_ARCHS & names:
        ctx.add(
            "info",
            "architectures",
            expected,
            show(arch),
            "Another DFlash2 class vLLM 0.34 registers; these checks assume z-lab's "
            "DFlash2DraftModel semantics.",
            check="config",
        )
        return
    ctx.add(
        "error",
        "architectures",
        expected,
        show(arch),
        "The config and weights are a DFlash2 drafter's, but engines pick the class from "
        "architectures: vLLM maps DFlashDraftModel to its first-generation drafter, which has no "
        "candidate selector or convolutions, so those trained modules are left out (SGLang builds "
        "the selector only for DFlash2DraftModel).",
        check="config",
    )


def check_dflash2(ctx: CheckContext, hidden: int | None, vocab: int | None) -> None:
    """The four fields, the group size against the hidden size, and the modules' shapes."""
    sizes = {field: _field(ctx, field) for field in FIELDS}
    group = sizes["conv_group_size"]
    if group is not None and hidden is not None and hidden % group:
        ctx.add(
            "error",
            "dflash_config.conv_group_size",
            f"a divisor of hidden_size ({hidden})",
            str(group),
            "The convolution mixes channels in groups of this size: vLLM raises ValueError "
            "('conv_group_size must divide hidden_size') and z-lab's code drops the channels "
            "past the last whole group.",
            check="config",
        )
        return
    if ctx.drafter.weights is not None and hidden is not None:
        _check_modules(ctx, ctx.drafter.weights.tensors, sizes, hidden, vocab)


def _field(ctx: CheckContext, field: str) -> int | None:
    key = f"dflash_config.{field}"
    value = get_path(ctx.cfg, key)
    if is_int(value) and value >= 1:
        return int(value)
    top = ctx.cfg.get(field, MISSING)
    where = f" (found at the top level, {show(top)}, where neither engine looks)" if top else ""
    ctx.add(
        "error",
        key,
        "a positive integer",
        show(value),
        f"DFlash2 sizes its candidate selector and convolutions from dflash_config.{field}: "
        f"vLLM fails without it (KeyError) and SGLang refuses the drafter{where} ({_SOURCE}).",
        check="config",
    )
    return None


def _check_modules(
    ctx: CheckContext,
    tensors: Mapping[str, TensorInfo],
    sizes: Mapping[str, int | None],
    hidden: int,
    vocab: int | None,
) -> None:
    """Every module the fields describe is in the checkpoint, with the shape they give."""
    rank, kernel, group = (
        sizes["selector_rank"],
        sizes["conv_kernel_size"],
        sizes["conv_group_size"],
    )
    expected: dict[str, tuple[int, ...] | None] = {
        f"{SELECTOR}.hidden_projection.weight": (rank, hidden) if rank else None,
        f"{SELECTOR}.predecessor_codebook": (vocab, rank) if rank and vocab else None,
        f"{SELECTOR}.successor_codebook": (vocab, rank) if rank and vocab else None,
    }
    if kernel and group:
        for conv in ("attention_conv", "mlp_conv"):
            expected[f"layers.0.{conv}.base_kernel"] = (2, kernel, hidden)
            expected[f"layers.0.{conv}.kernel_projection.weight"] = (
                2 * kernel * (hidden // group),
                hidden,
            )
    for name, shape in expected.items():
        found = _tensor(tensors, name)
        if found is None:
            ctx.add(
                "error",
                "weights",
                f"{name} (a DFlash2 module the config declares)",
                "(missing)",
                "The engine builds this module from the config and finds no trained weights "
                "for it: it runs uninitialised or the load fails, and acceptance collapses.",
                check="weights",
            )
        elif shape is not None and tuple(found.shape) != shape:
            ctx.add(
                "error",
                name,
                show(list(shape)),
                show(list(found.shape)),
                "The dflash_config fields (selector_rank, conv_kernel_size, conv_group_size) "
                "do not describe these weights: loading fails on the shape, or the fields were "
                "written for another checkpoint.",
                check="weights",
            )


def _tensor(tensors: Mapping[str, TensorInfo], name: str) -> TensorInfo | None:
    """A tensor under any prefix the exporters use, with or without ``.weight`` (z-lab saves
    the codebooks bare; vLLM and mlx name them ``…codebook.weight``)."""
    for candidate in (name, f"{name}.weight"):
        hit = tensors.get(candidate) or next(
            (t for n, t in tensors.items() if n.endswith(f".{candidate}")), None
        )
        if hit is not None:
            return hit
    return None


def dflash2_view(config: Mapping[str, Any]) -> dict[str, Any]:
    """A speculators-layout DFlash2 file (``speculators_model_type: dflash2``) as vLLM reads it:
    the DFlash layout plus the four fields moved into ``dflash_config`` (its speculators config
    adapter, ``update_dflash2``); any other file as it is."""
    if config.get("speculators_model_type") != "dflash2":
        return dict(config)
    view = checked_view({**config, "speculators_model_type": "dflash"})
    dflash = dict(view.get("dflash_config") or {})
    dflash.update({f: config[f] for f in FIELDS if config.get(f) is not None})
    view["dflash_config"] = dflash
    view["architectures"] = [DFLASH2_ARCH]
    return view


def dflash2_key(key: str, config: Mapping[str, Any]) -> str:
    """Where a speculators-layout DFlash2 file holds what a check calls ``key``."""
    if config.get("speculators_model_type") != "dflash2":
        return key
    field = key.removeprefix("dflash_config.")
    if field in FIELDS:
        return field
    return file_key(key, {**config, "speculators_model_type": "dflash"})
