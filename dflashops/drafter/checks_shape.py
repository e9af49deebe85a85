"""Checks that need no reference: value types, attention heads, and the block size the name says.

- Types: every key engines read has one JSON type. ``"rms_norm_eps": "1e-6"`` or
  ``"tie_word_embeddings": "false"`` parse without a word and build another model.
- Heads: ``num_attention_heads``, ``num_key_value_heads`` and ``head_dim`` are positive integers
  and the query heads divide into the key/value heads (grouped-query attention).
- ``-bN``: z-lab names drafters by the block they were trained with (``Qwen3-8B-DFlash-b16``).
  A ``block_size`` that contradicts the drafter's name (or its hub folder, ``_name_or_path`` or
  weights file names) was written for another checkpoint.

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import PurePath

from dflashops.drafter.context import CheckContext
from dflashops.drafter.keys import MISSING, get_path, is_int, show, type_name

DRAFTER_ARCH = "DFlashDraftModel"
DRAFTER_MODEL_TYPE = "qwen3"
BLOCK_KEYS = ("block_size", "dflash_config.block_size")
_NAMED_BLOCK = re.compile(r"(?:^|[-_.])b(\d{1,3})(?=$|[-_.])", re.IGNORECASE)

_NUMBER = "a number"
_STRING = "a string"
_BOOL = "a boolean"
_INT = "an integer"
_OBJECT = "an object"
# key -> the JSON types engines accept there (None: null is allowed too)
TYPES: dict[str, tuple[str, ...]] = {
    "model_type": (_STRING,),
    "torch_dtype": (_STRING,),
    "dtype": (_STRING,),
    "hidden_act": (_STRING,),
    "rms_norm_eps": (_NUMBER,),
    "rope_theta": (_NUMBER,),
    "rope_parameters": (_OBJECT, "null"),
    "rope_scaling": (_OBJECT, "null"),
    "max_position_embeddings": (_INT,),
    "max_window_layers": (_INT,),
    "tie_word_embeddings": (_BOOL,),
    "attention_bias": (_BOOL,),
    "use_sliding_window": (_BOOL,),
    "is_causal": (_BOOL, "null"),
    "target_hidden_size": (_INT, "null"),
    "draft_vocab_size": (_INT, "null"),
    "auto_map": (_OBJECT,),
    "dflash_config.causal": (_BOOL, "null"),
    "dflash_config.sample_from_anchor": (_BOOL,),
    "dflash_config.use_aux_hidden_state": (_BOOL,),
    "dflash_config.attention_sink_bias": (_BOOL,),
}


def _json_type(value: object) -> str:
    name = type_name(value)
    return _NUMBER if name == _INT else name


def check_types(ctx: CheckContext) -> None:
    """Each key in :data:`TYPES` present with another type is an error; ``model_type`` must be
    ``qwen3`` for z-lab's drafter class."""
    for key, allowed in TYPES.items():
        value = get_path(ctx.cfg, key)
        if value is MISSING:
            continue
        kinds = {type_name(value), _json_type(value)}
        if kinds & set(allowed):
            continue
        ctx.add(
            "error",
            key,
            " or ".join(allowed),
            f"{show(value)} ({type_name(value)})",
            "Engines and transformers take this value as it is: a quoted number or boolean is "
            'a string to them ("false" is true), so the drafter is built or run with another '
            "value than the one written.",
            check="config",
        )
    _check_model_type(ctx)


def _check_model_type(ctx: CheckContext) -> None:
    arch = ctx.cfg.get("architectures")
    if not (isinstance(arch, list) and DRAFTER_ARCH in arch):
        return
    value = ctx.cfg.get("model_type", MISSING)
    if value == DRAFTER_MODEL_TYPE or (value is not MISSING and not isinstance(value, str)):
        return  # a non-string is already an error of check_types
    ctx.add(
        "warning",
        "model_type",
        f'"{DRAFTER_MODEL_TYPE}"',
        show(value),
        "DFlashDraftModel is a Qwen3 model (z-lab's dflash/model.py: config_class = "
        "Qwen3Config) and vLLM builds its DFlash drafter from a Qwen3 config: transformers "
        "picks the class that parses config.json by model_type, so another value (or none) "
        "parses it with other keys and defaults, or not at all.",
        check="config",
    )


def check_heads(ctx: CheckContext) -> None:
    """Positive head counts and head_dim; query heads a multiple of key/value heads."""
    heads = ctx.config_int(
        "num_attention_heads",
        missing="warning",
        why_missing="Without it transformers' Qwen3Config assumes 32 query heads.",
    )
    kv = ctx.config_int(
        "num_key_value_heads",
        missing="warning",
        why_missing="Without it transformers' Qwen3Config assumes 32 key/value heads.",
    )
    ctx.config_int(
        "head_dim",
        missing=None,
        why_missing="transformers' Qwen3Config assumes 128 when it is absent.",
    )
    ctx.config_int("intermediate_size", missing=None, why_missing="")
    if heads is not None and kv is not None and heads % kv:
        ctx.add(
            "error",
            "num_key_value_heads",
            f"a divisor of num_attention_heads ({heads})",
            str(kv),
            "Grouped-query attention shares each key/value head among num_attention_heads / "
            "num_key_value_heads query heads; the drafter cannot be built with these counts.",
            check="config",
        )


def check_named_block_size(ctx: CheckContext) -> None:
    """``block_size`` against a ``-bN`` in the drafter's name, path, or weights file names."""
    named = sorted(set(_named_blocks(ctx)))
    if len({size for size, _ in named}) != 1:
        return  # no name, or names that disagree: nothing to hold the config to
    size, where = named[0]
    block = next(
        ((key, value) for key in BLOCK_KEYS if (value := get_path(ctx.cfg, key)) is not MISSING),
        None,
    )
    if block is None:
        ctx.add(
            "info",
            "block_size",
            f"{size} (the name {where} says b{size})",
            "(missing)",
            f"z-lab names drafters by the block they were trained with: this one drafts "
            f"blocks of {size}, so num_speculative_tokens should be at most {size - 1}.",
            check="name",
        )
        return
    key, value = block
    if not is_int(value) or value == size:
        return  # a non-integer is an error of check_block_size
    ctx.add(
        "error",
        key,
        f"{size} (the name {where} says b{size})",
        str(value),
        f"z-lab names drafters by the block they were trained with ('-b{size}': blocks of "
        f"{size}, {size - 1} drafted tokens per step). A block_size of {value} was written "
        "for another checkpoint: z-lab's code drafts blocks of the wrong length and "
        "num_speculative_tokens is held to the wrong limit.",
        check="name",
    )


def _named_blocks(ctx: CheckContext) -> Iterator[tuple[int, str]]:
    drafter = ctx.drafter
    names = [drafter.name]
    if drafter.path:
        parts = PurePath(drafter.path).parts
        names.append(parts[-1] if parts else "")
        names.extend(p.removeprefix("models--") for p in parts if p.startswith("models--"))
    name_or_path = drafter.config.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path:
        names.append(PurePath(name_or_path).name)
    if drafter.weights is not None:
        names.extend(PurePath(f).stem for f in drafter.weights.files)
    for name in names:
        for match in _NAMED_BLOCK.finditer(name):
            size = int(match.group(1))
            if size >= 2:
                yield size, repr(name)
