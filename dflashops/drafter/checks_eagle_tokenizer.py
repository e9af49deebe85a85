"""The tokenizer an EAGLE drafter was trained with, against the target's.

An EAGLE drafter reads and writes the target's token ids: vLLM and SGLang tokenize with the
target's tokenizer only and never load the drafter's. A drafter trained on another tokenizer
(another model family's, or another release's added tokens) drafts ids that mean other text to
the target. Its files say which tokenizer it was trained with in two places: the tokenizer
files some exporters ship next to it, and the special-token ids its config copied from its
target's config (``bos_token_id``: SpecForge's Qwen3 configs carry Qwen3's 151643, its Llama 3
one 128000). Only the HF layout's is the trainer's: speculators' converter writes transformers'
LlamaConfig defaults (1) there, and ``eos_token_id`` differs between a base model and its
instruct release of one tokenizer.

Standard library only.
"""

from __future__ import annotations

from typing import Any

from dflashops.drafter.checks_eagle_layout import EagleFile
from dflashops.drafter.context import CheckContext
from dflashops.drafter.keys import is_int, show

BOS = "bos_token_id"


def _ids(value: Any) -> set[int] | None:
    if is_int(value):
        return {int(value)}
    if isinstance(value, list) and value and all(is_int(v) for v in value):
        return {int(v) for v in value}
    return None


def check_tokenizer(ctx: CheckContext, cfg: EagleFile) -> None:
    if ctx.target is None:
        return
    _check_special_ids(ctx, cfg)
    _check_tokenizer_files(ctx)


def _check_special_ids(ctx: CheckContext, cfg: EagleFile) -> None:
    assert ctx.target is not None
    if cfg.speculators:
        return
    own, theirs = _ids(cfg.layer_value(BOS)), _ids(ctx.target.text_value(BOS))
    if own is not None and theirs is not None and not own & theirs:
        ctx.add(
            "warning",
            BOS,
            f"{show(ctx.target.text_value(BOS))} ({ctx.target.where(BOS)} of the target)",
            show(cfg.layer_value(BOS)),
            "The drafter's config names another tokenizer's special token: it was copied from "
            "another model's config, which is how a drafter for another tokenizer looks. The "
            "engines tokenize with the target's tokenizer only, so a drafter trained on "
            "another one drafts ids that mean other text.",
            check="tokenizer",
        )


def _check_tokenizer_files(ctx: CheckContext) -> None:
    assert ctx.target is not None
    mine, theirs = ctx.drafter.tokenizer, ctx.target.tokenizer
    if mine is None or theirs is None:
        return
    clashes = sorted(
        i
        for i in set(mine.added) & set(theirs.added)
        if mine.added[i].content != theirs.added[i].content
    )
    if clashes:
        first = clashes[0]
        ctx.add(
            "error",
            "tokenizer",
            f"the target's tokenizer (id {first} = {theirs.added[first].content!r})",
            f"another one (id {first} = {mine.added[first].content!r}"
            + (f", and {len(clashes) - 1} more ids" if len(clashes) > 1 else "")
            + ")",
            "The drafter ships a tokenizer whose added tokens sit at other ids than the "
            "target's: it was trained on another tokenizer, so every id it drafts around them "
            "means other text to the target, and vLLM and SGLang use only the target's.",
            check="tokenizer",
        )
        return
    if mine.size != theirs.size and mine.added and theirs.added:
        ctx.add(
            "warning",
            "tokenizer",
            f"{theirs.size} token ids (the target's tokenizer)",
            f"{mine.size} (the drafter's tokenizer)",
            "The drafter ships a tokenizer of another size than the target's: it was trained "
            "with another tokenizer release; ids past the shorter one mean nothing to it.",
            check="tokenizer",
        )
