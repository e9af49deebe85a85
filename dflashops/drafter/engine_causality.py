"""Does the engine run a speculators-trained DFlash drafter's layers as causal as it was trained?

The speculators trainer (``speculators/models/dflash/attention.py``) masks full-attention layers
non-causally always, and sliding-window layers causally unless ``sliding_window_non_causal``
(default false). The engines decide per layer differently:

- vLLM 0.26.0 and 0.32.0 (read in both): the speculators adapter (``update_dflash``) writes
  ``dflash_config.causal = not sliding_window_non_causal`` (true when the key is absent), and
  ``qwen3_dflash._dflash_layer_causal`` applies it to *every* layer. So a drafter with
  full-attention layers and ``sliding_window_non_causal: false`` runs them causally
  (vllm-project/vllm#56692, open, fixes it), and one with causal sliding layers but no key runs
  them non-causally.
- SGLang (0.5.16 ``models/dflash.py``, through dflashops' z-lab view): per layer type, sliding
  causal and full non-causal; it reads no ``causal`` key. So only sliding layers trained
  non-causally (``sliding_window_non_causal: true``) run differently there.

A layer run with another mask than it was trained with drafts worse; the server starts either way,
so these are warnings. Standard library only.
"""

from __future__ import annotations

from dflashops.drafter.result import Finding, engine_finding

Version = tuple[int, int, int]
VLLM_GLOBAL_CAUSAL_READ: Version = (0, 26, 0)
KEY = "sliding_window_non_causal"


def vllm_causality(
    version: Version, *, has_sliding: bool, has_full: bool, non_causal_key: bool | None
) -> Finding | None:
    """The layers vLLM runs with another mask than the speculators trainer used (a
    speculators-layout drafter: ``non_causal_key`` is its ``sliding_window_non_causal``)."""
    if version < VLLM_GLOBAL_CAUSAL_READ:
        return None
    causal_everywhere = not (True if non_causal_key is None else non_causal_key)
    sliding_trained_causal = not bool(non_causal_key)
    wrong = []
    if has_full and causal_everywhere:
        wrong.append("its full-attention layers causally (trained non-causal)")
    if has_sliding and causal_everywhere != sliding_trained_causal:
        wrong.append(
            "its sliding layers non-causally (trained causal)"
            if sliding_trained_causal
            else "its sliding layers causally (trained non-causal)"
        )
    if not wrong:
        return None
    fix = (
        f"{KEY}: true (every layer then runs non-causal, as trained)"
        if not has_sliding
        else f"{KEY}: false (as trained)"
        if not has_full
        else "none in this layout on vLLM (one override for every layer): serve it with SGLang, "
        "which decides per layer, or wait for vllm-project/vllm#56692"
    )
    return engine_finding(
        "warning",
        f"engine.{KEY}",
        fix,
        f"{KEY} {_shown(non_causal_key)}: vLLM runs " + " and ".join(wrong),
        "vLLM's speculators adapter turns sliding_window_non_causal into one dflash_config.causal "
        "(true when the key is false, false when absent) that overrides every layer "
        "(qwen3_dflash._dflash_layer_causal, read in 0.26.0 and 0.32.0); the speculators trainer "
        "masks full-attention layers non-causally always and sliding layers causally unless the "
        "key says otherwise. Layers run with another mask draft worse; vllm-project/vllm#56692 "
        "(open) keeps full attention non-causal.",
    )


def sglang_causality(*, has_sliding: bool, non_causal_key: bool | None) -> Finding | None:
    """SGLang runs sliding layers causally whatever the file says; a drafter trained with
    non-causal sliding layers drafts with another mask there."""
    if not (has_sliding and non_causal_key):
        return None
    return engine_finding(
        "warning",
        f"engine.{KEY}",
        "vLLM for this drafter (its sliding layers run non-causal there, as trained)",
        f"{KEY} true: SGLang runs the sliding layers causally (trained non-causal)",
        "SGLang builds each DFlash layer from layer_types alone (models/dflash.py, 0.5.16: "
        "sliding_attention causal with its window, full_attention non-causal) and reads no "
        "causal key, so sliding layers trained without a causal mask draft worse there.",
    )


def _shown(value: bool | None) -> str:
    return "absent" if value is None else str(value).lower()
