"""Checks of the drafter against its target: which target layers it reads, and the pairing."""

from __future__ import annotations

import itertools

from dflashops.drafter.context import CheckContext, TargetFacts
from dflashops.drafter.keys import MISSING, get_path, is_int, json_equal, show

IDS_KEY = "dflash_config.target_layer_ids"
_WHY_IDS = "The drafter concatenates the outputs of these target layers, in this order, into fc; "


def even_spread(num_target_layers: int, count: int) -> list[int]:
    """z-lab's default ``target_layer_ids``: ``count`` ids spread evenly from 1 to N-3.

    ``build_target_layer_ids`` in z-lab/dflash ``dflash/model.py``: one id -> ``[N // 2]``,
    otherwise ``round(1 + i * (N - 4) / (count - 1))``. N=64, count=5 -> [1, 16, 31, 46, 61];
    N=36 -> [1, 9, 17, 25, 33]."""
    if count == 1:
        return [num_target_layers // 2]
    return [round(1 + i * (num_target_layers - 4) / (count - 1)) for i in range(count)]


def check_target_layer_ids(
    ctx: CheckContext, facts: TargetFacts, dflash_ok: bool, draft_layers: int | None
) -> list[int] | None:
    """The ids: a strictly increasing list inside the target, near z-lab's spread."""
    raw = get_path(ctx.cfg, IDS_KEY)
    n = facts.layers
    if raw is MISSING:
        if dflash_ok:
            fallback = (
                f" (z-lab would compute {even_spread(n, draft_layers)})"
                if n and draft_layers and n >= 5 and draft_layers <= n - 3
                else ""
            )
            ctx.add(
                "warning",
                IDS_KEY,
                "the list the checkpoint was trained with" + fallback,
                "(missing)",
                "Without it z-lab's code computes an even spread over num_target_layers and "
                "other engines have nothing to read; set it so every engine feeds the drafter "
                "the layers it was trained on.",
                check="config",
            )
        return None
    if not isinstance(raw, list) or not raw or not all(is_int(v) for v in raw):
        ctx.add(
            "error",
            IDS_KEY,
            "a non-empty list of target layer indices",
            show(raw),
            "The drafter reads the target's hidden states after these layers.",
            check="config",
        )
        return None
    ids = [int(v) for v in raw]
    if any(b <= a for a, b in itertools.pairwise(ids)):
        ctx.add(
            "error",
            IDS_KEY,
            "strictly increasing ids",
            show(ids),
            _WHY_IDS + "a repeated or reordered id feeds fc other features than it was trained on.",
            check="config",
        )
        return ids
    if n is None:
        return ids
    outside = [i for i in ids if not 0 <= i < n]
    if outside:
        ctx.add(
            "error",
            IDS_KEY,
            f"ids in 0..{n - 1} ({n} layers, {facts.layers_from})",
            show(outside),
            _WHY_IDS + "an id outside the target has no hidden state: the engine fails or reads "
            "the wrong layer.",
            check="target",
        )
        return ids
    _check_spread(ctx, ids, n, facts.layers_from)
    return ids


def _check_spread(ctx: CheckContext, ids: list[int], n: int, n_from: str) -> None:
    """A warning when the ids are not z-lab's even spread: shifted by one, or far off.

    Far means more than a quarter of the spacing between neighbouring ids (at least 1)."""
    count = len(ids)
    if n < 5 or count > n - 3:
        return
    known = ctx.ref.value(IDS_KEY) if ctx.ref is not None else None
    if known is not None and json_equal(known.value, ids):
        return
    usual = even_spread(n, count)
    if ids == usual:
        return
    spacing = (n - 4) / (count - 1) if count > 1 else n / 2
    if ids in ([i + 1 for i in usual], [i - 1 for i in usual]):
        why = (
            "These are z-lab's even spread shifted by one. config.json holds 0-based layer "
            "outputs; engines log, and GGUF files store, the capture index one higher (vLLM "
            "prints 'Using auxiliary layers from speculative config: (2, 17, …)'). Copying those "
            "shifts every feature by a layer."
        )
    elif max(abs(a - b) for a, b in zip(ids, usual, strict=True)) > max(1, round(spacing / 4)):
        why = (
            f"Far from z-lab's even spread over {n} layers ({n_from}), which real z-lab drafters "
            "use. Unless this checkpoint was trained on these layers, the drafter reads features "
            "it has never seen."
        )
    else:
        return
    ctx.add("warning", IDS_KEY, show(usual), show(ids), why, check="spread")


def check_pairing(
    ctx: CheckContext, facts: TargetFacts, hidden: int | None, vocab: int | None
) -> None:
    """Hidden size and vocabulary against a real target config."""
    t_hidden, t_vocab = facts.config_hidden, facts.config_vocab
    own_hidden = get_path(ctx.cfg, "target_hidden_size")
    if t_hidden is not None and is_int(own_hidden) and own_hidden != t_hidden:
        ctx.add(
            "error",
            "target_hidden_size",
            f"{t_hidden} (target config)",
            show(own_hidden),
            "fc projects target hidden states of this width; the target produces another.",
            check="target",
        )
    if hidden is not None and t_hidden is not None and hidden != t_hidden:
        separate = is_int(own_hidden) and own_hidden == t_hidden
        ctx.add(
            "warning" if separate else "error",
            "hidden_size",
            f"{t_hidden} (target config)",
            str(hidden),
            "The drafter shares the target's embeddings and LM head, so its hidden size must be "
            "the target's; a different one means a drafter for another model.",
            check="target",
        )
    if vocab is not None and t_vocab is not None and vocab != t_vocab:
        ctx.add(
            "error",
            "vocab_size",
            f"{t_vocab} (target config)",
            str(vocab),
            "The drafter shares the target's vocabulary: every token id must mean the same token "
            "in both.",
            check="target",
        )


def check_num_target_layers(ctx: CheckContext, facts: TargetFacts, ids: list[int] | None) -> None:
    """``num_target_layers``: a range SGLang holds the ids to, and z-lab's old fallback.

    vLLM never reads the key. z-lab's ``dflash/model.py`` used it only to guess the ids when
    ``target_layer_ids`` is absent, and requires the ids since z-lab/dflash#157 (the survey in
    #156: every published checkpoint sets them). SGLang's ``DFlashDraftModel`` (0.5.11-0.5.23,
    DSpark included) passes it to ``resolve_target_layer_ids`` as the layer count every id must be
    below, and spreads the guess over it when the ids are absent. So a value above every id but
    off the target's count changes nothing an engine does; one at or below an id stops SGLang."""
    own = ctx.config_int("num_target_layers", missing=None, why_missing="")
    if own is None:
        return
    t_layers = facts.config_layers
    if ids and own <= max(ids):
        ctx.add(
            "error",
            "num_target_layers",
            f"> {max(ids)} (every target_layer_ids entry must be below it)"
            + (f"; the target has {t_layers}" if t_layers is not None else ""),
            str(own),
            "SGLang checks target_layer_ids against num_target_layers "
            "(DFlashDraftConfig.resolve_target_layer_ids) and refuses to start "
            "('DFLASH target_layer_ids contains an out-of-range layer id').",
            check="target",
        )
        return
    if t_layers is None or own == t_layers:
        return
    if not ids:
        ctx.add(
            "error",
            "num_target_layers",
            f"{t_layers} (target config)",
            str(own),
            "Without target_layer_ids, z-lab's code (before z-lab/dflash#157) and SGLang spread "
            f"the drafter's taps over num_target_layers: over {own} layers instead of the "
            f"target's {t_layers} the drafter reads layers it was not trained on.",
            check="target",
        )
        return
    ctx.add(
        "warning",
        "num_target_layers",
        f"{t_layers} (target config)",
        str(own),
        "No DFlash loader uses it while target_layer_ids is set: vLLM never reads it, z-lab's "
        "code requires the ids (z-lab/dflash#156, #157), and SGLang only checks that every id "
        f"is below it, which holds. A count other than the target's {t_layers} may mean the "
        "config was written for another target: check target_layer_ids against this one.",
        check="target",
    )
