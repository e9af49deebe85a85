"""A separate small model as the drafter: its vocabulary size, the context it covers, and the
engine releases that serve it (the tokenizer rules are in
:mod:`dflashops.drafter.checks_draft_model_tokens`).

Sources: vLLM's ``vllm/config/speculative.py`` (the draft's ``ModelConfig``, its
``max_model_len`` and the vocabulary check) and ``vllm/v1/spec_decode/draft_model.py``; SGLang's
``spec_info.py`` (the STANDALONE algorithm). Releases read: vLLM 0.8.5-0.34.0, SGLang
0.4.6-0.5.23. Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dflashops.drafter.checks_lookup_versions import Window
from dflashops.drafter.engine import EngineSpec, Version
from dflashops.drafter.keys import MISSING, first_present, is_int, show
from dflashops.drafter.result import Finding, Severity

# 0.10.0-0.14.1 raise NotImplementedError "Speculative decoding with draft model is not supported
# yet" from SpeculativeConfig; 0.15.0 adds v1/spec_decode/draft_model.py
DRAFT_VLLM = Window((0, 15, 0), (0, 14, 1))
# up to 0.9.2 the config takes a draft model and the V1 engine falls back to V0 for it
# (engine/arg_utils.py: "Other speculative decoding methods are not supported yet")
VLLM_V0_ONLY: Version = (0, 10, 0)
DRAFT_SGLANG = Window((0, 5, 2), (0, 5, 1))  # STANDALONE first in spec_info.py 0.5.2
# use_heterogeneous_vocab (translate ids between two tokenizers, greedy drafts only): 0.25.0
HETEROGENEOUS_VLLM = Window((0, 25, 0), (0, 24, 0))
VLLM_FORBIDS_UNKNOWN: Version = (0, 16, 0)

# the keys vLLM's ModelConfig takes the model's length from (the smallest one present wins)
LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
# rope types whose factor multiplies the length (_get_and_verify_max_len: the others, yarn and
# llama3 among them, already state the scaled length in max_position_embeddings)
SCALING_TYPES = frozenset({"linear", "dynamic"})


def _finding(severity: Severity, key: str, expected: str, found: str, why: str) -> Finding:
    return Finding(severity, key, expected, found, why, "draft_model")


def vocab_findings(
    draft: Mapping[str, Any], target_vocab: Any, engine: EngineSpec | None, mapped: bool
) -> list[Finding]:
    mine = _text(draft, "vocab_size")
    if not is_int(mine) or not is_int(target_vocab):
        return [
            _finding(
                "warning",
                "vocab_size",
                f"{show(target_vocab)} (the target's)",
                show(mine),
                "Without both sizes the vocabulary check vLLM makes at start was not made.",
            )
        ]
    if mine == target_vocab:
        return []
    if mapped:
        return [
            _finding(
                "info",
                "vocab_size",
                f"{target_vocab} (the target's)",
                str(mine),
                "use_heterogeneous_vocab: vLLM 0.25+ maps ids between the two tokenizers and "
                "drafts only tokens both have (v1/spec_decode/vocab_mapping.py); greedy drafting "
                "only.",
            )
        ]
    engine_says = (
        "SGLang's STANDALONE worker does not check: the draft's ids index another vocabulary"
        if engine is not None and engine.name == "sglang"
        else "vLLM refuses to start: 'Target and draft model should have the same vocabulary "
        "size' (config/speculative.py, verify_equal_vocab_size_if_draft_model)"
    )
    return [
        _finding(
            "error",
            "vocab_size",
            f"{target_vocab} (the target's)",
            str(mine),
            f"A draft model must share the target's vocabulary: {engine_says}. Even one extra "
            "padded row means another tokenizer or another embedding layout.",
        )
    ]


def max_length(config: Mapping[str, Any]) -> tuple[int, str] | None:
    """The length vLLM derives from a config: the smallest length key, times a linear or
    dynamic rope factor (``_get_and_verify_max_len`` in ``vllm/config/model.py``)."""
    found = [(int(v), k) for k in LENGTH_KEYS for v in (_text(config, k),) if is_int(v) and v > 0]
    if not found:
        return None
    length, key = min(found)
    scaling = _text(config, "rope_scaling")
    if isinstance(scaling, Mapping):
        kind = scaling.get("rope_type", scaling.get("type"))
        factor = scaling.get("factor")
        if kind in SCALING_TYPES and isinstance(factor, int | float) and factor >= 1:
            return int(length * factor), f"{key} × rope_scaling.factor"
    return length, key


def length_findings(
    draft: Mapping[str, Any], target: Mapping[str, Any] | None, served: Any
) -> list[Finding]:
    """The draft's positions must cover every position the server serves."""
    mine = max_length(draft)
    if mine is None:
        return [
            _finding(
                "warning",
                "max_position_embeddings",
                "the draft's context length",
                "(missing)",
                "vLLM then assumes 2048 positions for the draft (vllm/config/model.py); longer "
                "requests run it past its rotary table.",
            )
        ]
    if is_int(served) and served > 0:
        need, where = int(served), "max_model_len (served)"
    else:
        theirs = max_length(target) if target is not None else None
        if theirs is None:
            return []
        need, where = theirs[0], f"target {theirs[1]}"
    length, key = mine
    if length >= need:
        return []
    return [
        _finding(
            "error",
            key.split(" ")[0],
            f">= {need} ({where})",
            str(length),
            "vLLM caps the draft at min(draft, target) max_model_len but feeds it the target's "
            "positions (config/speculative.py _maybe_override_draft_max_model_len; only EAGLE "
            "drafts get their rotary table widened, #48894): past this length the draft's rotary "
            "cache is indexed out of bounds, so long requests fail or draft garbage. Serve a "
            f"shorter max_model_len (<= {length}) or pick a draft with a longer context.",
        )
    ]


def engine_findings(engine: EngineSpec, mapped: bool) -> list[Finding]:
    out: list[Finding] = []
    if engine.name == "sglang":
        window = DRAFT_SGLANG
    elif engine.version < VLLM_V0_ONLY:
        return [
            _finding(
                "info",
                "engine",
                f"vllm{DRAFT_VLLM.wanted}",
                str(engine),
                f"{engine} serves a draft model on its V0 engine only (the V1 engine falls back "
                "to V0 for it, engine/arg_utils.py).",
            )
        ]
    else:
        window = DRAFT_VLLM
    support = window.support(engine.version)
    if support == "no":
        out.append(
            _finding(
                "error",
                "engine",
                f"{engine.name}{window.wanted}",
                str(engine),
                f"{engine} cannot speculate with a draft model: vLLM 0.10-0.14 raise "
                "NotImplementedError 'Speculative decoding with draft model is not supported "
                "yet'; SGLang before 0.5.2 has no STANDALONE algorithm.",
            )
        )
    elif support == "unknown":
        out.append(
            _finding(
                "info",
                "engine",
                f"{engine.name}{window.wanted}",
                str(engine),
                window.unread(engine),
            )
        )
    if mapped:
        out += _heterogeneous(engine)
    return out


def _heterogeneous(engine: EngineSpec) -> list[Finding]:
    if engine.name == "vllm" and HETEROGENEOUS_VLLM.support(engine.version) == "yes":
        return []
    refused = engine.name == "vllm" and engine.version >= VLLM_FORBIDS_UNKNOWN
    return [
        _finding(
            "error" if refused else "warning",
            "use_heterogeneous_vocab",
            f"vllm{HETEROGENEOUS_VLLM.wanted}",
            str(engine),
            f"{engine} has no use_heterogeneous_vocab: "
            + (
                "its speculative config forbids unknown fields, so the server does not start."
                if refused
                else "the setting is ignored and the ids are not mapped."
            ),
        )
    ]


def _text(config: Mapping[str, Any], key: str) -> Any:
    hit = first_present(config, (f"text_config.{key}", key))
    return hit[1] if hit is not None else MISSING
