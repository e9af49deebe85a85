"""MTP: the target's own multi-token-prediction layers as the drafter.

Four things must agree before an engine drafts with them (the target's tables are in
:mod:`dflashops.drafter.checks_mtp_arch`):

- the target's config declares its MTP layers (``num_nextn_predict_layers``,
  ``mtp_num_hidden_layers`` or the family's key): vLLM's ``hf_config_override`` makes that count
  the drafter's ``n_predict`` and the MTP model builds that many layers;
- the weights hold those layers (a quantized or pruned copy often drops them): vLLM 0.18+ refuses
  a DeepSeek checkpoint without them, every other loader leaves them at their initial values;
- the method name is one the engine release takes (``mtp`` from vLLM 0.11; ``deepseek_mtp`` and
  friends before), and the release drafts with this architecture at all;
- ``num_speculative_tokens``: vLLM refuses a k above the layer count that is not a multiple of it,
  and later positions reuse layers trained for the first ones.

Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dflashops.drafter.checks_lookup_versions import Window
from dflashops.drafter.checks_mtp_arch import (
    GENERIC_COUNT_KEYS,
    VLLM_GENERIC_MTP,
    MtpArch,
    arch_of,
)
from dflashops.drafter.engine import EngineSpec
from dflashops.drafter.keys import first_present, is_int, show
from dflashops.drafter.result import Finding, Severity
from dflashops.drafter.safetensors import WeightsInfo

COUNT_WHY = (
    "vLLM's hf_config_override makes this the MTP drafter's n_predict and its MTP model builds "
    "that many layers (vllm/config/speculative.py, model_executor/models/*_mtp.py)"
)


def _finding(severity: Severity, key: str, expected: str, found: str, why: str) -> Finding:
    return Finding(severity, key, expected, found, why, "mtp")


def mtp_layer_count(config: Mapping[str, Any]) -> tuple[list[Finding], int | None]:
    """How many MTP layers the config declares, as the engine reads it (with the findings)."""
    arch = arch_of(config)
    keys = arch.count_keys if arch is not None else GENERIC_COUNT_KEYS
    hit = first_present(config, keys)
    if hit is None:
        return _no_count(config, arch, keys)
    key, value = hit
    if not is_int(value) or value < 1:
        return [
            _finding(
                "error",
                key,
                "an integer >= 1",
                show(value),
                f"{COUNT_WHY}. With none, vLLM divides num_speculative_tokens by 0 or builds no "
                "MTP layer, so the server fails at start: this checkpoint cannot draft with MTP.",
            )
        ], None
    return [], int(value)


def _no_count(
    config: Mapping[str, Any], arch: MtpArch | None, keys: tuple[str, ...]
) -> tuple[list[Finding], int | None]:
    if arch is not None and arch.count_default is not None:
        note = _finding(
            "info",
            keys[0],
            "the number of MTP layers",
            "(missing)",
            f"vLLM builds {arch.count_default} {arch.name} MTP layer without it and needs "
            "num_speculative_tokens set (vllm/config/speculative.py); the weights decide.",
        )
        return [note], arch.count_default
    archs = config.get("architectures")
    what = f"{arch.name} targets read it" if arch else f"no MTP key in {show(archs)}'s config"
    return [
        _finding(
            "error",
            keys[0],
            "the number of MTP layers (>= 1)",
            "(missing)",
            f"{COUNT_WHY}; {what}. Without it the MTP model reads a missing attribute, or vLLM "
            "finds no MTP drafter for the architecture ('Unsupported speculative method: mtp'): "
            "the server does not start.",
        )
    ], None


def weights_findings(
    config: Mapping[str, Any], weights: WeightsInfo | None, count: int | None
) -> list[Finding]:
    """Every declared MTP layer has tensors in the checkpoint."""
    arch = arch_of(config)
    if arch is None or count is None:
        return []
    if weights is None:
        return [
            _finding(
                "info",
                "weights",
                "the checkpoint's safetensors headers",
                "(not read)",
                "The MTP layers' tensors were not checked: a quantized or pruned copy often "
                "drops them.",
            )
        ]
    main = _main_layers(config)
    if main is None and arch.after_main:
        return []  # the MTP layers' names cannot be known without the main layer count
    names = tuple(weights.tensors)
    out: list[Finding] = []
    for i in range(count):
        prefixes = arch.prefixes(main or 0, i)
        if any(name.startswith(prefixes) for name in names):
            continue
        out.append(
            _finding(
                "error",
                prefixes[0].rstrip("."),
                f"MTP layer {i} of {count} ({arch.name}: tensors named {prefixes[0]}*)",
                "(no such tensor)",
                "The MTP drafter loads this layer from the checkpoint. vLLM 0.18+ refuses a "
                "DeepSeek-V3 checkpoint without it ('MTP speculative decoding layer … weights "
                "missing from checkpoint', deepseek_mtp.py); other loaders keep the layer at its "
                "initial values and nearly every draft is rejected.",
            )
        )
    return out


def _main_layers(config: Mapping[str, Any]) -> int | None:
    hit = first_present(config, ("num_hidden_layers", "text_config.num_hidden_layers"))
    return int(hit[1]) if hit is not None and is_int(hit[1]) and hit[1] >= 0 else None


def engine_findings(config: Mapping[str, Any], engine: EngineSpec, method: str) -> list[Finding]:
    arch = arch_of(config)
    out: list[Finding] = []
    if arch is None:
        out.append(
            _finding(
                "info",
                "architectures",
                "an MTP target dflashops knows (DeepSeek-V3, MiMo, GLM-4.5, Qwen3-Next, Qwen3.5)",
                show(config.get("architectures")),
                f"dflashops has no MTP facts for this architecture on {engine}: whether it "
                "drafts with it, and what its MTP tensors are called, were not checked.",
            )
        )
    else:
        window = arch.vllm if engine.name == "vllm" else arch.sglang
        out += _window(window, engine, f"{arch.name} MTP")
        if engine.name == "sglang" and not arch.sglang_sets_draft_path:
            out.append(
                _finding(
                    "info",
                    "speculative_draft_model_path",
                    "the target's own path",
                    "(not set by SGLang)",
                    f"SGLang fills --speculative-draft-model-path with the target only for "
                    f"DeepSeek/GLM targets (server_args.py, 0.5.10); for {arch.name} pass the "
                    "target's path, or NEXTN has no draft model.",
                )
            )
    if engine.name == "vllm":
        out += _method_findings(engine, method, arch)
    return out


def _window(window: Window, engine: EngineSpec, what: str) -> list[Finding]:
    support = window.support(engine.version)
    if support == "yes":
        return []
    if support == "unknown":
        return [
            _finding(
                "info",
                "engine",
                f"{engine.name}{window.wanted}",
                str(engine),
                window.unread(engine),
            )
        ]
    return [
        _finding(
            "error",
            "engine",
            f"{engine.name}{window.wanted}",
            str(engine),
            f"{engine} has no {what}: its draft-config override (vLLM's hf_config_override, "
            "SGLang's _config_draft_model) has no case for this architecture, so the server "
            "refuses the speculative config.",
        )
    ]


def _method_findings(engine: EngineSpec, method: str, arch: MtpArch | None) -> list[Finding]:
    generic = VLLM_GENERIC_MTP.support(engine.version)
    legacy = arch.legacy_method if arch is not None else None
    if method == "mtp":
        if generic == "no":
            expected = legacy or "the architecture's *_mtp method"
            return [
                _finding(
                    "error",
                    "method",
                    expected,
                    "mtp",
                    f"{engine} has no method 'mtp' (its SpeculativeMethod lists deepseek_mtp and "
                    "per-architecture names; 'mtp' arrives in 0.11.0): the speculative config "
                    f"is refused. Use {expected}, or vLLM >= 0.11.",
                )
            ]
        if generic == "unknown":
            return [
                _finding(
                    "info", "method", "vllm>=0.11.0", str(engine), VLLM_GENERIC_MTP.unread(engine)
                )
            ]
        return []
    if method.endswith("_mtp") and generic == "yes":
        return [
            _finding(
                "info",
                "method",
                "mtp",
                method,
                "vLLM 0.11+ logs 'method … is deprecated and replaced with mtp' and runs it as "
                "mtp (vllm/config/speculative.py).",
            )
        ]
    return []


def k_findings(
    engine: EngineSpec | None, k: int | None, count: int, arch: MtpArch | None
) -> list[Finding]:
    """k against the MTP layer count: refused when vLLM cannot reuse the layers evenly, a
    warning when later positions reuse layers trained for earlier ones."""
    if k is None:
        return []
    layers = count
    if engine is not None and engine.name == "sglang" and arch is not None:
        # SGLang's NextN drafts hold one decoder layer (deepseek_nextn.py, glm4_moe_nextn.py;
        # num_nextn_predict_layers forced to 1 for Qwen3-Next/3.5 in model_config.py, 0.5.10)
        # and run it speculative_num_steps times
        layers = 1
    if engine is not None and engine.name == "vllm" and k > layers and k % layers:
        return [
            _finding(
                "error",
                "num_speculative_tokens",
                f"<= {layers} or a multiple of {layers} (MTP layers)",
                str(k),
                f"vLLM raises 'num_speculative_tokens:{k} must be divisible by n_predict={layers}' "
                "(vllm/config/speculative.py, every release read): the server does not start.",
            )
        ]
    if k > layers:
        return [
            _finding(
                "warning",
                "num_speculative_tokens",
                f"<= {layers} (the MTP layers the target has)",
                str(k),
                f"The target has {layers} MTP layer(s); positions past them rerun those layers "
                "on their own guesses, which they were not trained for. vLLM warns it 'may result "
                "in lower acceptance rate' (vllm/config/speculative.py): check the per-position "
                "acceptance before keeping this k.",
            )
        ]
    return []
