"""Checks on the drafter config alone: class, dflash_config, block size (attention kinds and
the window are in :mod:`dflashops.drafter.checks_attention`)."""

from __future__ import annotations

from dflashops.drafter.checks_dflash2 import check_dflash2_architecture
from dflashops.drafter.checks_dspark import check_dspark_architecture
from dflashops.drafter.context import CheckContext
from dflashops.drafter.family_names import Family
from dflashops.drafter.keys import MISSING, get_path, is_int, show

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


def check_architecture(ctx: CheckContext, family: Family = "dflash") -> None:
    """The class engines build from ``architectures``, by the family's own classes."""
    if family == "dflash2":
        check_dflash2_architecture(ctx)
        return
    if family == "dspark":
        check_dspark_architecture(ctx)
        return
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
