"""Checks on the drafter config alone: class, layer kinds, window, dflash_config, block size."""

from __future__ import annotations

from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import DrafterShape
from dflashops.drafter.keys import MISSING, first_present, get_path, is_int, show

FULL = "full_attention"
SLIDING = "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)
DRAFTER_ARCH = "DFlashDraftModel"
# Other DFlash drafter classes vLLM 0.32 registers (its model registry's speculative models).
OTHER_DFLASH_ARCHS = frozenset(
    {
        "DFlash2DraftModel",
        "DFlashLagunaForCausalLM",
        "DFlashMuseGlimmerAssistantModel",
        "MuseGlimmerAssistantModel",
    }
)
BLOCK_KEYS = ("block_size", "dflash_config.block_size")
# vLLM >= 0.25 reads the window from dflash_config.swa_window_size first, then sliding_window.
WINDOW_KEYS = ("dflash_config.swa_window_size", "sliding_window")


def check_architecture(ctx: CheckContext) -> None:
    arch = ctx.cfg.get("architectures", MISSING)
    expected = f'["{DRAFTER_ARCH}"]'
    why = (
        "Engines pick the drafter class from architectures: vLLM maps DFlashDraftModel to its "
        "DFlash Qwen3 drafter; another class does not build a DFlash drafter."
    )
    if not isinstance(arch, list) or not arch or not all(isinstance(a, str) for a in arch):
        ctx.add("error", "architectures", expected, show(arch), why, check="config")
    elif DRAFTER_ARCH in arch:
        return
    elif OTHER_DFLASH_ARCHS & set(arch):
        ctx.add(
            "info",
            "architectures",
            expected,
            show(arch),
            "Another DFlash drafter class (vLLM 0.32 registers it); these checks assume z-lab's "
            "DFlashDraftModel semantics.",
            check="config",
        )
    elif any("dflash" in a.lower() for a in arch):
        ctx.add("warning", "architectures", expected, show(arch), why, check="config")
    else:
        ctx.add("error", "architectures", expected, show(arch), why, check="config")


def check_layer_types(ctx: CheckContext, layers: int | None) -> DrafterShape:
    """``layer_types`` against ``num_hidden_layers``; the window when a layer slides."""
    anchor = get_path(ctx.cfg, "dflash_config.sample_from_anchor") is True
    raw = ctx.cfg.get("layer_types", MISSING)
    if raw is MISSING:
        ctx.add(
            "info",
            "layer_types",
            "one entry per drafter layer",
            "(missing)",
            "Every drafter layer then runs as non-causal full attention: right for drafters "
            "trained all-full (the Qwen3.5 family), wrong for sliding-window ones (Qwen3.6).",
            check="config",
        )
        return DrafterShape(has_sliding=False, has_full=True, sample_from_anchor=anchor)
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        ctx.add(
            "error",
            "layer_types",
            "a list of full_attention / sliding_attention",
            show(raw),
            "Engines read one attention kind per drafter layer from this list.",
            check="config",
        )
        return DrafterShape(sample_from_anchor=anchor)
    if layers is not None and len(raw) != layers:
        ctx.add(
            "error",
            "layer_types",
            f"{layers} entries (num_hidden_layers)",
            f"{len(raw)} entries",
            "layer_types is indexed by drafter layer: a short list fails at load, a long one was "
            "written for another drafter.",
            check="config",
        )
    unknown = sorted({v for v in raw if v not in LAYER_TYPES})
    if unknown:
        ctx.add(
            "error",
            "layer_types",
            " or ".join(LAYER_TYPES),
            show(unknown[:3]),
            "Anything but sliding_attention runs as non-causal full attention, so a misspelt "
            "sliding layer silently loses its causal window.",
            check="config",
        )
    shape = DrafterShape(
        has_sliding=SLIDING in raw,
        has_full=any(v != SLIDING for v in raw),
        sample_from_anchor=anchor,
    )
    if shape.has_sliding:
        _check_window(ctx)
    return shape


def _check_window(ctx: CheckContext) -> None:
    hit = first_present(ctx.cfg, WINDOW_KEYS)
    if hit is None or hit[1] is None:
        ctx.add(
            "error",
            hit[0] if hit else "sliding_window",
            "a window size in tokens (2048 for Qwen3.6-27B-DFlash)",
            "null" if hit else "(missing)",
            "Sliding layers need a window: vLLM >= 0.25 raises ValueError without "
            "dflash_config.swa_window_size or sliding_window, and z-lab's code runs them "
            "unbounded instead of with the window they were trained with.",
            check="config",
        )
        return
    key, value = hit
    if not is_int(value) or value < 1:
        ctx.add("error", key, "a positive integer", show(value), "Not a window.", check="config")
        return
    use = ctx.cfg.get("use_sliding_window", MISSING)
    if key != "sliding_window" or ctx.cfg.get("model_type", "qwen3") != "qwen3" or use is True:
        return
    ctx.add(
        "warning" if use is False else "info",
        "use_sliding_window",
        "true, or the window in dflash_config.swa_window_size",
        show(use),
        "transformers' Qwen3Config (model_type qwen3) replaces sliding_window with None unless "
        "use_sliding_window is true (models/qwen3/configuration_qwen3.py), so code that reads "
        "the parsed config sees no window; vLLM >= 0.25 reads dflash_config.swa_window_size "
        "first.",
        check="config",
    )


def check_dflash_config(ctx: CheckContext) -> bool:
    """Whether ``dflash_config`` is an object (its keys are checked elsewhere)."""
    raw = ctx.cfg.get("dflash_config", MISSING)
    if isinstance(raw, dict):
        return True
    ctx.add(
        "error",
        "dflash_config",
        "an object with mask_token_id and target_layer_ids",
        show(raw),
        "vLLM refuses to start without dflash_config.mask_token_id, and the target layers the "
        "drafter was trained on are unknown.",
        check="config",
    )
    return False


def check_block_size(ctx: CheckContext) -> None:
    """``block_size`` (top level or in ``dflash_config``) and ``k <= block_size - 1``."""
    values: dict[str, int] = {}
    present = False
    for key in BLOCK_KEYS:
        raw = get_path(ctx.cfg, key)
        if raw is MISSING:
            continue
        present = True
        if is_int(raw) and raw >= 2:
            values[key] = int(raw)
            continue
        ctx.add(
            "error",
            key,
            "an integer >= 2",
            show(raw),
            "The drafter fills block_size - 1 masked positions per step.",
            check="config",
        )
    if len(set(values.values())) > 1:
        ctx.add(
            "error",
            "block_size",
            "one block size",
            ", ".join(f"{k}={v}" for k, v in values.items()),
            "z-lab's code reads the top-level value, other tools dflash_config's: they would "
            "draft blocks of different lengths.",
            check="config",
        )
    if not present:
        ctx.add(
            "info" if ctx.k is None else "warning",
            "block_size",
            "the block size the drafter was trained with (16 for z-lab's b16 drafters)",
            "(missing)",
            "vLLM does not read it, but z-lab's code does, and num_speculative_tokens cannot be "
            "checked against block_size - 1 without it.",
            check="config",
        )
    size = next(iter(values.values()), None)
    if ctx.k is not None and size is not None and ctx.k > size - 1:
        ctx.add(
            "error",
            "num_speculative_tokens",
            f"<= {size - 1} (block_size - 1)",
            str(ctx.k),
            "One slot of each block is the anchor (the bonus token); the drafter was trained to "
            f"predict only the other {size - 1}. Later positions were never trained and are "
            "always rejected: they cost compute and add nothing.",
            check="config",
        )
