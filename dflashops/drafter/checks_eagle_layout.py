"""An EAGLE-3 or EAGLE drafter's files as the engines read them: the two config layouts, the
target's sizes, and the engine version the rules follow.

- **HF layout** (SafeAILab's EAGLE repos, SpecForge, AngelSlim): a Llama (or Qwen3) config at
  the top level, ``architectures`` naming the drafter class (``LlamaForCausalLMEagle3``), and at
  the top level ``draft_vocab_size``, optional ``target_hidden_size`` and
  ``eagle_aux_hidden_state_layer_ids``, or SGLang's nested ``eagle_config``.
- **speculators layout** (vLLM's ``speculators`` library, RedHatAI's drafters):
  ``speculators_model_type: eagle3``, the layer config under ``transformer_layer_config``, the
  EAGLE-3 fields at the top level, ``speculators_config`` naming the verifier. vLLM builds the
  drafter's config from ``transformer_layer_config`` plus those top-level fields
  (``update_eagle3`` in vllm/transformers_utils/configs/speculators/algos.py, 0.32 and 0.34),
  so ``eagle_config`` means nothing there.

Standard library only, like the rest of the validation core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import EngineSpec, Version
from dflashops.drafter.keys import MISSING, is_int

LAYER_CONFIG = "transformer_layer_config"
NESTED = "eagle_config"
AUX_IDS = "eagle_aux_hidden_state_layer_ids"
SPECULATORS_KINDS = frozenset({"eagle3", "eagle"})
# the release dflashops' playbooks pin by default (docs/playbook.md): the rules follow it when
# no --engine is given
PLAYBOOK_VLLM: Version = (0, 34, 0)


@dataclass(frozen=True)
class EagleFile:
    """One drafter ``config.json`` and where each value sits in it."""

    config: Mapping[str, Any]

    @property
    def speculators(self) -> bool:
        return str(self.config.get("speculators_model_type") or "").lower() in SPECULATORS_KINDS

    @property
    def layer(self) -> Mapping[str, Any]:
        """The decoder layer's config: the file itself, or speculators' nested one."""
        if not self.speculators:
            return self.config
        nested = self.config.get(LAYER_CONFIG)
        return nested if isinstance(nested, Mapping) else {}

    def layer_key(self, key: str) -> str:
        return f"{LAYER_CONFIG}.{key}" if self.speculators else key

    def layer_value(self, key: str) -> Any:
        return self.layer.get(key, MISSING)

    def layer_int(self, key: str) -> int | None:
        value = self.layer.get(key)
        return int(value) if is_int(value) and value >= 1 else None

    def top(self, key: str) -> Any:
        return self.config.get(key, MISSING)

    def top_int(self, key: str) -> int | None:
        value = self.config.get(key)
        return int(value) if is_int(value) and value >= 1 else None

    @property
    def nested(self) -> Mapping[str, Any]:
        """SGLang's ``eagle_config`` (the HF layout only; vLLM's speculators reader drops it)."""
        value = self.config.get(NESTED)
        return value if isinstance(value, Mapping) and not self.speculators else {}

    @property
    def architectures(self) -> list[str]:
        raw = self.config.get("architectures")
        return [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []


@dataclass(frozen=True)
class EagleTarget:
    """The target's layer count, hidden size and vocabulary, each with where it came from:
    the target's config first (``text_config`` for multimodal targets), else the reference."""

    layers: int | None
    layers_from: str
    hidden: int | None
    hidden_from: str
    vocab: int | None
    vocab_from: str
    model_type: str | None = None


def eagle_target(ctx: CheckContext) -> EagleTarget:
    layers, hidden, vocab = (
        ctx.target_int(k) for k in ("num_hidden_layers", "hidden_size", "vocab_size")
    )
    ref = ctx.ref.target if ctx.ref is not None else None
    ref_label = f"reference target {ref.name}" if ref is not None else ""

    def pick(own: int | None, known: int | None) -> tuple[int | None, str]:
        if own is not None:
            return own, "target config"
        return (known, ref_label) if known is not None else (None, "")

    n, n_from = pick(layers, ref.num_hidden_layers if ref else None)
    h, h_from = pick(hidden, ref.hidden_size if ref else None)
    v, v_from = pick(vocab, ref.vocab_size if ref else None)
    model_type = ctx.target.text_value("model_type") if ctx.target is not None else None
    return EagleTarget(
        n, n_from, h, h_from, v, v_from, model_type if isinstance(model_type, str) else None
    )


def vllm_version(engine: EngineSpec | None) -> Version | None:
    """The vLLM release whose reading the rules follow (None: the engine is SGLang)."""
    if engine is None:
        return PLAYBOOK_VLLM
    return engine.version if engine.name == "vllm" else None


def engine_label(engine: EngineSpec | None) -> str:
    return str(engine) if engine is not None else "vllm==0.34.0 (the playbook default)"
