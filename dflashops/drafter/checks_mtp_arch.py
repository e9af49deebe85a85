"""The MTP targets dflashops knows: where each declares its MTP layers, what the weights call
them, and the engine releases that draft with them.

Read from vLLM's ``SpeculativeConfig.hf_config_override`` (``vllm/config/speculative.py``, or
``vllm/config.py`` before 0.10.1), which turns the target's own config into the MTP drafter's,
and from each model's MTP loader (``vllm/model_executor/models/*_mtp.py``); SGLang's from
``ModelConfig._config_draft_model`` (``python/sglang/srt/configs/model_config.py``), which renames
the target's architecture to its NextN/MTP class. Releases read: vLLM 0.8.5-0.34.0, SGLang
0.4.6-0.5.23. Standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dflashops.drafter.checks_lookup_versions import Window


def _after_main(n: int, i: int) -> tuple[str, ...]:
    # deepseek_mtp.py / glm4_moe_mtp.py: MTP layer i is decoder layer num_hidden_layers + i
    # (get_spec_layer_idx_from_weight_name, model_executor/models/utils.py)
    return (f"model.layers.{n + i}.", f"model.language_model.layers.{n + i}.")


def _mimo(n: int, i: int) -> tuple[str, ...]:
    # mimo_mtp.py: the checkpoint keeps MTP layers 0-indexed under model.mtp_layers
    return (f"model.mtp_layers.{i}.",)


def _qwen_mtp(n: int, i: int) -> tuple[str, ...]:
    # qwen3_next_mtp.py / qwen3_5_mtp.py load every "mtp." tensor (mtp.layers.i, mtp.fc, ...)
    return (f"mtp.layers.{i}.", f"model.mtp.layers.{i}.")


@dataclass(frozen=True)
class MtpArch:
    """One MTP target family.

    ``count_keys``: where vLLM reads the number of MTP layers (``n_predict``), in order, a
    dotted path under the config; ``count_default``: the layer count vLLM's MTP model builds when
    the key is absent (None: it reads the attribute and fails). ``legacy_method``: the method
    vLLM before 0.11 wanted (0.11 takes ``mtp`` and maps the old names to it)."""

    name: str
    architectures: frozenset[str]
    count_keys: tuple[str, ...]
    count_default: int | None
    prefixes: Callable[[int, int], tuple[str, ...]]
    vllm: Window
    sglang: Window
    legacy_method: str | None
    sglang_sets_draft_path: bool = False

    @property
    def after_main(self) -> bool:
        """Whether the MTP layers are numbered after the main ones (the names need the count)."""
        return self.prefixes is _after_main


ARCHS: tuple[MtpArch, ...] = (
    MtpArch(
        # vLLM 0.8.5 has no deepseek_mtp method; 0.9.0.1 has it (0.9.0 not read)
        "DeepSeek-V3/R1",
        frozenset({"DeepseekV3ForCausalLM"}),
        ("num_nextn_predict_layers",),
        None,
        _after_main,
        Window((0, 9, 0), (0, 8, 5)),
        Window((0, 4, 6)),
        "deepseek_mtp",
        sglang_sets_draft_path=True,
    ),
    MtpArch(
        "MiMo",
        frozenset({"MiMoForCausalLM"}),
        ("num_nextn_predict_layers",),
        None,
        _mimo,
        Window((0, 9, 0), (0, 8, 5)),
        Window((0, 4, 8), (0, 4, 6)),
        "deepseek_mtp",
    ),
    MtpArch(
        "GLM-4.5/4.6",
        frozenset({"Glm4MoeForCausalLM"}),
        ("num_nextn_predict_layers",),
        None,
        _after_main,
        Window((0, 10, 0), (0, 9, 2)),
        Window((0, 4, 10), (0, 4, 9)),
        "deepseek_mtp",
        sglang_sets_draft_path=True,
    ),
    MtpArch(
        # qwen3_next_mtp.py builds getattr(config, "num_nextn_predict_layers", 1) layers
        "Qwen3-Next",
        frozenset({"Qwen3NextForCausalLM"}),
        ("num_nextn_predict_layers",),
        1,
        _qwen_mtp,
        Window((0, 10, 2), (0, 10, 1)),
        Window((0, 5, 2), (0, 5, 1)),
        "qwen3_next_mtp",
    ),
    MtpArch(
        # qwen3_5_mtp.py builds getattr(config, "mtp_num_hidden_layers", 1) layers; the count
        # sits at the top of text-only checkpoints and under text_config otherwise
        "Qwen3.5/3.6",
        frozenset(
            {
                "Qwen3_5ForConditionalGeneration",
                "Qwen3_5MoeForConditionalGeneration",
                "Qwen3_5ForCausalLM",
                "Qwen3_5MoeForCausalLM",
            }
        ),
        ("mtp_num_hidden_layers", "text_config.mtp_num_hidden_layers"),
        1,
        _qwen_mtp,
        Window((0, 17, 0), (0, 16, 0)),
        Window((0, 5, 9), (0, 5, 5)),
        None,
    ),
)
# the count keys of MTP targets dflashops has no entry for (ernie, longcat, nemotron-h, ...)
GENERIC_COUNT_KEYS = (
    "num_nextn_predict_layers",
    "mtp_num_hidden_layers",
    "text_config.num_nextn_predict_layers",
    "text_config.mtp_num_hidden_layers",
)
# vLLM 0.11.0 is the first release with the method "mtp" (0.10.2's SpeculativeMethod lacks it)
VLLM_GENERIC_MTP = Window((0, 11, 0), (0, 10, 2))


def arch_of(config: Mapping[str, Any]) -> MtpArch | None:
    """The entry for the config's first architecture, the one vLLM's override switches on."""
    archs = config.get("architectures")
    first = archs[0] if isinstance(archs, list) and archs else None
    return next((a for a in ARCHS if first in a.architectures), None)
