"""An EAGLE-3 drafter's vocabularies: the target's, the reduced one it drafts, and the map
between them.

vLLM 0.34 (vllm/model_executor/models/llama_eagle3.py; the same in 0.32):

- embeddings and the final logits are over ``vocab_size``, which must be the target's;
- the head drafts over ``draft_vocab_size`` (default ``vocab_size``): ``lm_head`` is
  ``[draft_vocab_size, hidden_size]``;
- when ``draft_vocab_size`` differs from the target's vocabulary it creates
  ``draft_id_to_target_id`` (zeros) and loads the weights' ``d2t`` into it; ``t2d`` is skipped.
  Without ``d2t`` every drafted id i stays target id i: the draft proposes the wrong tokens;
  with ``d2t`` but no reduced vocabulary there is no parameter to load it into and loading
  fails. SGLang reads ``d2t`` the same way (``hot_token_id``, llama_eagle3.py).
- SGLang ties ``lm_head`` to ``embed_tokens`` when ``tie_word_embeddings`` is true, dropping the
  trained draft head; vLLM's EAGLE-3 classes never tie.
"""

from __future__ import annotations

from collections.abc import Mapping

from dflashops.drafter.checks_eagle_layout import EagleFile, EagleTarget
from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import EngineSpec
from dflashops.drafter.keys import MISSING, is_int, show
from dflashops.drafter.result import Severity
from dflashops.drafter.safetensors import TensorInfo

DRAFT_VOCAB = "draft_vocab_size"


def check_vocab(ctx: CheckContext, cfg: EagleFile, target: EagleTarget) -> tuple[int, int] | None:
    """(vocab_size, draft_vocab_size) as the engine takes them, with findings on each."""
    key = cfg.layer_key("vocab_size")
    vocab = ctx.config_int(
        key,
        missing="error",
        why_missing="Without it transformers' LlamaConfig assumes 32000; the drafter embeds and "
        "scores the target's vocabulary.",
    )
    if vocab is not None and target.vocab is not None and vocab != target.vocab:
        ctx.add(
            "error",
            key,
            f"{target.vocab} ({target.vocab_from})",
            str(vocab),
            "vLLM's EAGLE-3 drafter embeds and returns logits over vocab_size, and the target "
            "samples over its own: another size means a drafter for another tokenizer, or "
            "logits the sampler cannot line up (llama_eagle3.py compute_logits).",
            check="target",
        )
    draft = _draft_vocab(ctx, cfg, vocab)
    return (vocab, draft) if vocab is not None and draft is not None else None


def _draft_vocab(ctx: CheckContext, cfg: EagleFile, vocab: int | None) -> int | None:
    raw = cfg.top(DRAFT_VOCAB)
    if raw is MISSING or raw is None:
        return vocab  # vLLM and SGLang default it to vocab_size
    if not is_int(raw) or raw < 1:
        ctx.add(
            "error",
            DRAFT_VOCAB,
            "a positive integer (or absent: the full vocabulary)",
            show(raw),
            "vLLM sizes the drafter's lm_head and its draft-to-target map by it.",
            check="config",
        )
        return None
    if vocab is not None and raw > vocab:
        ctx.add(
            "error",
            DRAFT_VOCAB,
            f"at most vocab_size ({vocab})",
            str(raw),
            "The draft vocabulary is a subset of the target's: d2t maps each draft id onto a "
            "target id, and there are only vocab_size of them.",
            check="config",
        )
        return None
    return int(raw)


def check_vocab_map(
    ctx: CheckContext,
    tensors: Mapping[str, TensorInfo],
    sizes: tuple[int, int],
    target: EagleTarget,
    hidden: int | None,
) -> None:
    """d2t/t2d present exactly when the draft vocabulary is reduced; lm_head and embeddings
    shaped as the engine builds them."""
    vocab, draft = sizes
    target_vocab = target.vocab or vocab
    d2t, t2d = tensors.get("d2t"), tensors.get("t2d")
    reduced = draft != target_vocab
    if reduced and d2t is None:
        ctx.add(
            "error",
            "d2t",
            f"a [{draft}] draft-to-target offset tensor in the weights",
            "(missing)",
            f"draft_vocab_size {draft} is smaller than the target's {target_vocab}: vLLM leaves "
            "draft_id_to_target_id at zeros (llama_eagle3.py) and SGLang has no hot_token_id, "
            "so draft id i is proposed as target id i, a different token: acceptance "
            "collapses.",
            check="weights",
        )
    elif reduced and d2t is not None and list(d2t.shape) != [draft]:
        ctx.add(
            "error",
            "d2t",
            f"[{draft}] (draft_vocab_size)",
            show(list(d2t.shape)),
            "vLLM loads d2t into a [draft_vocab_size] parameter: another shape fails to load, "
            "and means the map was built for another draft vocabulary.",
            check="weights",
        )
    elif not reduced and d2t is not None:
        ctx.add(
            "error",
            "d2t",
            f"no d2t (draft_vocab_size equals the target's {target_vocab})",
            show(list(d2t.shape)),
            "vLLM creates draft_id_to_target_id only for a reduced draft vocabulary; with the "
            "full one the weights' d2t has nowhere to go and loading fails ('There is no "
            "module or parameter named ...', model_executor/models/utils.py).",
            check="weights",
        )
    if reduced and t2d is not None and list(t2d.shape) != [target_vocab]:
        ctx.add(
            "warning",
            "t2d",
            f"[{target_vocab}] (the target's vocabulary)",
            show(list(t2d.shape)),
            "vLLM and SGLang skip t2d, but its length is the vocabulary the map was built "
            "for: another one means d2t may point at another tokenizer's ids.",
            check="weights",
        )
    _check_head(ctx, tensors, draft, vocab, hidden)


def _check_head(
    ctx: CheckContext,
    tensors: Mapping[str, TensorInfo],
    draft: int,
    vocab: int,
    hidden: int | None,
) -> None:
    for name, rows in (("lm_head.weight", draft), ("embed_tokens.weight", vocab)):
        tensor = tensors.get(name) or tensors.get(f"model.{name}")
        if tensor is None or len(tensor.shape) != 2:
            continue
        expected = [rows, hidden if hidden is not None else tensor.shape[1]]
        if list(tensor.shape) == expected:
            continue
        ctx.add(
            "error",
            name,
            show(expected),
            show(list(tensor.shape)),
            "vLLM builds lm_head as [draft_vocab_size, hidden_size] and the embeddings as "
            "[vocab_size, hidden_size] (llama_eagle3.py): loading these weights fails on shapes.",
            check="weights",
        )


def check_tied_head(
    ctx: CheckContext, cfg: EagleFile, sizes: tuple[int, int] | None, engine: EngineSpec | None
) -> None:
    """``tie_word_embeddings: true`` with a reduced draft vocabulary: harmless on vLLM, the
    trained head is dropped on SGLang."""
    key = cfg.layer_key("tie_word_embeddings")
    if cfg.layer_value("tie_word_embeddings") is not True or sizes is None:
        return
    vocab, draft = sizes
    if draft == vocab:
        return
    severity: Severity = (
        "warning" if engine is None else "error" if engine.name == "sglang" else "info"
    )
    ctx.add(
        severity,
        key,
        "false",
        "true",
        "SGLang's LlamaForCausalLMEagle3 ties lm_head to embed_tokens when this is true "
        "(python/sglang/srt/models/llama_eagle3.py): the trained [draft_vocab_size] head is "
        "dropped and the drafter scores the first draft_vocab_size target tokens through the "
        "embeddings, so acceptance collapses. vLLM's EAGLE-3 classes never tie (llama_eagle3.py). "
        "SpecForge shipped its Qwen3-4B config so and fixed it (sgl-project/SpecForge#139).",
        check="vocab",
    )
