"""The mask token: present, inside both vocabularies, a reserved id of the target tokenizer, and
not the target's padding token.

The padding rule: TorchSpec's GLM-5.2 DSpark config (lightseekorg/TorchSpec#133) shipped 154820,
GLM's pad token (its config's ``pad_token_id``, ``<|endoftext|>``), as the mask; the review of
that change found it "trains on PAD embeddings instead of GLM's actual mask token and silently
corrupts the DSpark objective". A pad token is special, so the reserved-id rule alone passes it.
"""

from __future__ import annotations

import re

from dflashops.drafter.context import CheckContext
from dflashops.drafter.files import TokenizerInfo
from dflashops.drafter.keys import first_present, is_int, json_equal, show

MASK_KEY = "dflash_config.mask_token_id"
# vLLM falls back to these when dflash_config.mask_token_id is absent (llm_base_proposer.py).
MASK_FALLBACKS = ("pard_token", "ptd_token_id")

# padding and placeholder tokens by their text: <pad>, [PAD], <|vision_pad|>, <|fim_pad|>, …
_PAD_TEXT = re.compile(r"pad", re.IGNORECASE)
_PLACEHOLDER = (
    "Every masked draft slot is embedded as this id, and the drafter must have been trained on a "
    "reserved mask embedding. The target's padding token is a placeholder the model reads for "
    "'nothing here' (and, in GLM, also ends text): a drafter configured with it embeds every "
    "masked slot as padding instead of its trained mask, so drafting collapses (the defect "
    "lightseekorg/TorchSpec#133's review found in its GLM-5.2 DSpark config, mask 154820). Use "
    "the tokenizer's mask token, or the reserved id the drafter was trained with."
)

_RESERVED = (
    "DFlash mask tokens are reserved ids that text never produces: an id that is ordinary text "
    "is almost surely a guess (the drafter learned its mask embedding from a reserved id), and "
    "real occurrences in the prompt would read as masks."
)


def check_mask_token(
    ctx: CheckContext, dflash_ok: bool, vocab: int | None, t_vocab: int | None, t_vocab_from: str
) -> None:
    hit = first_present(ctx.cfg, (MASK_KEY, *MASK_FALLBACKS))
    if hit is None:
        if dflash_ok:
            ctx.add(
                "error",
                MASK_KEY,
                "the drafter's mask token id",
                "(missing)",
                "vLLM refuses to start without a mask token id, and z-lab's code has nothing to "
                "embed in the masked slots.",
                check="config",
            )
        return
    key, value = hit
    if key != MASK_KEY:
        ctx.add(
            "warning",
            MASK_KEY,
            f"{MASK_KEY} (vLLM also reads {key})",
            f"only {key}",
            f"vLLM falls back to {key}, but z-lab's code reads only {MASK_KEY}.",
            check="config",
        )
    if not is_int(value) or value < 0:
        ctx.add("error", key, "a token id", show(value), "Not a token id.", check="config")
        return
    for size, label in ((vocab, "drafter vocab_size"), (t_vocab, t_vocab_from)):
        if size is not None and value >= size:
            ctx.add(
                "error",
                key,
                f"an id below {size} ({label})",
                str(value),
                "Every masked slot is embedded as this id; an id outside the vocabulary fails "
                "the embedding lookup.",
                check="config",
            )
            return
    _check_kind(ctx, key, int(value))


def target_pad_id(ctx: CheckContext) -> int | None:
    """The target config's ``pad_token_id`` (``text_config`` first), if it states one."""
    if ctx.target is None:
        return None
    value = ctx.target.text_value("pad_token_id")
    return int(value) if is_int(value) else None


def _placeholder(ctx: CheckContext, token_id: int, tokenizer: TokenizerInfo) -> str | None:
    """How the tokenizer names ``token_id`` when it is the target's padding token or a
    placeholder token (None: it is neither)."""
    token = tokenizer.added.get(token_id)
    content = show(token.content) if token is not None else "(no text in the tokenizer files)"
    if token_id == target_pad_id(ctx):
        return f"{token_id} = {content}, the target's pad_token_id"
    if token is not None and _PAD_TEXT.search(token.content):
        return f"{token_id} = {content}, a padding/placeholder token"
    return None


def _check_kind(ctx: CheckContext, key: str, token_id: int) -> None:
    tokenizer, whose = ctx.tokenizer()
    expected = f"a special (reserved) token of the {whose or 'target tokenizer'}"
    if tokenizer is None and token_id == target_pad_id(ctx):
        ctx.add(
            "warning",
            key,
            "a reserved mask id, not the target's padding token",
            f"{token_id}, the target config's pad_token_id",
            _PLACEHOLDER + " No tokenizer files next to the target to name the token.",
            check="tokenizer",
        )
        return
    if tokenizer is None:
        ctx.add(
            "info",
            key,
            expected,
            str(token_id),
            "No tokenizer files next to the target (or drafter): not verified that the mask "
            "token is a reserved id.",
            check="tokenizer",
        )
        return
    placeholder = _placeholder(ctx, token_id, tokenizer)
    if placeholder is not None:
        ctx.add(
            "error",
            key,
            "a reserved mask id, not a padding/placeholder token of the " + whose,
            placeholder,
            _PLACEHOLDER,
            check="tokenizer",
        )
        return
    kind = tokenizer.classify(token_id)
    if kind == "special":
        return
    if kind == "added":
        content = show(tokenizer.added[token_id].content)
        found = f"{token_id} = {content}, an added token not marked special"
        ctx.add("warning", key, expected, found, _RESERVED, check="tokenizer")
    elif kind == "ordinary":
        found = f"{token_id}, ordinary text"
        ctx.add("error", key, expected, found, _RESERVED, check="tokenizer")
    elif kind == "unused":
        confirmed = ctx.ref is not None and any(
            v.path == MASK_KEY and json_equal(v.value, token_id) for v in ctx.ref.keys
        )
        # the first row past every token is where DFlash trainers put the mask when the
        # tokenizer has none (z-lab's and RedHat's Qwen3-8B drafters: 151669 = 151643 + 26)
        first_free = token_id == tokenizer.size
        why = (
            "An embedding row no text produces: plausible for a mask (z-lab's Qwen3-8B drafter "
            "uses 151669, one past Qwen3's tokens) but the tokenizer cannot confirm it; check "
            "the drafter's card."
        )
        if first_free:
            why = (
                "The first embedding row past every token of the tokenizer: where DFlash "
                "trainers put the mask when the tokenizer has none (z-lab's and RedHat's "
                "Qwen3-8B drafters use 151669, one past Qwen3's 151668)."
            )
        if confirmed and ctx.ref is not None:
            why += f" {ctx.ref.name} uses this id."
        ctx.add(
            "info" if confirmed or first_free else "warning",
            key,
            expected,
            f"{token_id}, past the tokenizer's last id ({tokenizer.size - 1})",
            why,
            check="tokenizer",
        )
    else:
        ctx.add(
            "info",
            key,
            expected,
            f"{token_id}, not in the {whose}'s files",
            "Could not classify the id from the tokenizer files.",
            check="tokenizer",
        )
