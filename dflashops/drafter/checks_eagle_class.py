"""Which drafter class each engine builds from an EAGLE-3 or EAGLE config, and whether the
engine version serves the method for this target at all.

vLLM wraps the drafter's config in ``EAGLEConfig`` (vllm/transformers_utils/configs/eagle.py):
for ``eagle3`` every architecture that does not start (or, from 0.11, end) with ``Eagle3`` gets
the prefix ``Eagle3``, for ``eagle`` the prefix ``Eagle``; the model registry must then know the
name, or the server refuses ("Model architectures [...] are not supported"). A speculators-layout
drafter gets its class from ``transformer_layer_config.model_type`` instead (``update_eagle3``:
llama -> Eagle3LlamaForCausalLM, qwen3 -> Eagle3Qwen3ForCausalLM, anything else a ValueError).
SGLang builds the class ``architectures`` names (its EAGLE-3 drafter is ``LlamaForCausalLMEagle3``
in python/sglang/srt/models/llama_eagle3.py, its EAGLE one ``LlamaForCausalLMEagle``).

The registries below were read in the vLLM sdists of each listed release; a version between two
of them is held to the earlier one.
"""

from __future__ import annotations

from collections.abc import Mapping

from dflashops.drafter.checks_eagle_layout import (
    LAYER_CONFIG,
    EagleFile,
    EagleTarget,
    vllm_version,
)
from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import EngineSpec, Version
from dflashops.drafter.keys import MISSING, show

QWEN3_EAGLE3 = "Eagle3Qwen3ForCausalLM"
# vllm/model_executor/models/registry.py, the EAGLE-3 drafter classes of each release read
VLLM_EAGLE3_CLASSES: Mapping[Version, frozenset[str]] = {
    (0, 8, 5): frozenset({"Eagle3LlamaForCausalLM"}),
    (0, 11, 0): frozenset({"Eagle3LlamaForCausalLM", "LlamaForCausalLMEagle3"}),
    (0, 32, 0): frozenset(
        {
            "Eagle3LlamaForCausalLM",
            "LlamaForCausalLMEagle3",
            "Eagle3MiniMaxM2ForCausalLM",
            "Eagle3Qwen2_5vlForCausalLM",
            "Eagle3Qwen3vlForCausalLM",
            QWEN3_EAGLE3,
            "Eagle3DeepseekV2ForCausalLM",
            "Eagle3DeepseekV3ForCausalLM",
        }
    ),
}
VLLM_EAGLE_CLASSES: Mapping[Version, frozenset[str]] = {
    (0, 8, 5): frozenset({"EagleLlamaForCausalLM"}),
    (0, 9, 2): frozenset({"EagleLlamaForCausalLM", "EagleMiniCPMForCausalLM"}),
    (0, 10, 0): frozenset(
        {"EagleLlamaForCausalLM", "EagleMiniCPMForCausalLM", "EagleLlama4ForCausalLM"}
    ),
    (0, 11, 0): frozenset(
        {
            "EagleLlamaForCausalLM",
            "EagleMiniCPMForCausalLM",
            "EagleLlama4ForCausalLM",
            "EagleDeepSeekMTPModel",
        }
    ),
    (0, 32, 0): frozenset(
        {
            "EagleLlamaForCausalLM",
            "EagleMiniCPMForCausalLM",
            "EagleLlama4ForCausalLM",
            "EagleDeepSeekMTPModel",
            "EagleCohereForCausalLM",
            "EagleMistralForCausalLM",
            "EagleMistralLarge3ForCausalLM",
        }
    ),
}
VLLM_FIRST_EAGLE3: Version = (0, 8, 5)
# 0.8.5-0.10.0 refuse a target whose model_type lacks "llama" ("Eagle3 is only supported for
# Llama models"); 0.11.0 allows these model types (vllm/config/speculative.py)
VLLM_EAGLE3_ANY_LLAMA: Version = (0, 11, 0)
# 0.8.5-0.11.0 take the aux layers from the target alone (gpu_model_runner.py); 0.32 reads the
# drafter's top-level ids. Releases between were not read: they are assumed to read like 0.32
VLLM_READS_AUX_IDS: Version = (0, 12, 0)
VLLM_AUX_IDS_READ: Version = (0, 32, 0)
VLLM_EAGLE3_TARGETS_0_11 = ("llama", "qwen", "minicpm", "gpt_oss")
SPECULATORS_CLASSES: Mapping[str, str] = {"llama": "Eagle3LlamaForCausalLM", "qwen3": QWEN3_EAGLE3}


def _known(table: Mapping[Version, frozenset[str]], version: Version) -> frozenset[str]:
    read = [v for v in table if v <= version]
    return table[max(read)] if read else frozenset()


def vllm_class_name(arch: str, *, eagle3: bool, version: Version) -> str:
    """The registry name vLLM's EAGLEConfig turns ``arch`` into."""
    if not eagle3:
        return arch if arch.startswith("Eagle") else f"Eagle{arch}"
    kept = arch.startswith("Eagle3") or (
        version >= VLLM_EAGLE3_ANY_LLAMA and arch.endswith("Eagle3")
    )
    return arch if kept else f"Eagle3{arch}"


def vllm_drafter_class(cfg: EagleFile, *, eagle3: bool, version: Version) -> str | None:
    """The class vLLM builds (None: none it knows)."""
    if eagle3 and cfg.speculators:
        model_type = cfg.layer.get("model_type", "llama")
        return SPECULATORS_CLASSES.get(model_type) if isinstance(model_type, str) else None
    table = VLLM_EAGLE3_CLASSES if eagle3 else VLLM_EAGLE_CLASSES
    names = [vllm_class_name(a, eagle3=eagle3, version=version) for a in cfg.architectures]
    return next((n for n in names if n in _known(table, version)), None)


def check_drafter_class(
    ctx: CheckContext, cfg: EagleFile, engine: EngineSpec | None, *, eagle3: bool
) -> str | None:
    """The class the engine builds, with a finding when it builds none (or the wrong one)."""
    version = vllm_version(engine)
    if version is None:
        _check_sglang_class(ctx, cfg, eagle3=eagle3)
        return None
    if eagle3 and cfg.speculators:
        return _speculators_class(ctx, cfg)
    name = vllm_drafter_class(cfg, eagle3=eagle3, version=version)
    table = VLLM_EAGLE3_CLASSES if eagle3 else VLLM_EAGLE_CLASSES
    if name is not None or version < min(table):
        return name  # an older release than any read: check_vllm_release speaks for it
    known = _known(table, version)
    later = set().union(*table.values()) - known
    mapped = [vllm_class_name(a, eagle3=eagle3, version=version) for a in cfg.architectures]
    release = ".".join(map(str, version))
    method = "eagle3" if eagle3 else "eagle"
    if any(m in later for m in mapped):
        ctx.add(
            "warning",
            "architectures",
            f"an {method} drafter class of vLLM {release}: one of {sorted(known)}",
            show(cfg.config.get("architectures", MISSING)),
            f"vLLM turns these into {mapped} (vllm/transformers_utils/configs/eagle.py); a "
            "later release's registry has that class, the last release read before "
            f"{release} does not: check the server really builds it.",
            check="class",
        )
        return None
    ctx.add(
        "error",
        "architectures",
        f"an {method} drafter class vLLM {release} knows: one of {sorted(known)}",
        show(cfg.config.get("architectures", MISSING)),
        f"vLLM's EAGLEConfig turns these into {mapped} (vllm/transformers_utils/configs/"
        "eagle.py) and its model registry has none of them: the server refuses the "
        "speculative config ('Model architectures ... are not supported').",
        check="class",
    )
    return None


def _speculators_class(ctx: CheckContext, cfg: EagleFile) -> str | None:
    layer = cfg.config.get(LAYER_CONFIG)
    if not isinstance(layer, Mapping):
        ctx.add(
            "error",
            LAYER_CONFIG,
            "an object: the drafter's decoder layer config",
            show(cfg.config.get(LAYER_CONFIG, MISSING)),
            "vLLM builds a speculators-layout drafter from this object "
            "(SpeculatorsConfig.extract_transformers_pre_trained_config) and cannot without it.",
            check="class",
        )
        return None
    if "speculators_config" not in cfg.config:
        ctx.add(
            "error",
            "speculators_config",
            "an object naming the verifier and the proposal method",
            "(missing)",
            "vLLM recognises a speculators checkpoint by this key: with no model_type at the "
            "top level and no speculators_config, transformers cannot parse the config "
            "(vllm/transformers_utils/config.py, 0.34) and the server does not start.",
            check="class",
        )
    name = SPECULATORS_CLASSES.get(str(layer.get("model_type", "llama")))
    if name is None:
        ctx.add(
            "error",
            f"{LAYER_CONFIG}.model_type",
            f"one of {sorted(SPECULATORS_CLASSES)}",
            show(layer.get("model_type", MISSING)),
            "vLLM's update_eagle3 (transformers_utils/configs/speculators/algos.py) maps only "
            "these to an EAGLE-3 class and raises 'Unsupported model_type' otherwise.",
            check="class",
        )
    return name


def _check_sglang_class(ctx: CheckContext, cfg: EagleFile, *, eagle3: bool) -> None:
    suffix = "Eagle3" if eagle3 else "Eagle"
    archs = cfg.architectures
    if cfg.speculators:
        ctx.add(
            "warning",
            "speculators_model_type",
            "the HF layout (architectures: [LlamaForCausalLMEagle3])",
            show(cfg.config.get("speculators_model_type")),
            "SGLang builds the class architectures names; whether it reads the speculators "
            "layout's nested layer config was not verified.",
            check="class",
        )
        return
    if archs and archs[0].endswith(suffix):
        return
    ctx.add(
        "error",
        "architectures",
        f'["LlamaForCausalLM{suffix}"] (an SGLang {suffix} drafter class)',
        show(cfg.config.get("architectures", MISSING)),
        "SGLang builds the model class architectures[0] names; its "
        f"{'EAGLE-3' if eagle3 else 'EAGLE'} drafter is LlamaForCausalLM{suffix} "
        f"(python/sglang/srt/models/llama_eagle{'3' if eagle3 else ''}.py). Another name "
        "loads a plain model that reads no target hidden states, or none at all.",
        check="class",
    )


def check_vllm_release(
    ctx: CheckContext, engine: EngineSpec | None, target: EagleTarget, *, eagle3: bool
) -> None:
    """Releases that have no ``eagle3`` method, or refuse this target for it."""
    if engine is None or engine.name != "vllm" or not eagle3:
        return
    version = engine.version
    if version < VLLM_FIRST_EAGLE3:
        ctx.add(
            "error",
            "engine",
            "vllm>=0.8.5",
            str(engine),
            "vLLM before 0.8.5 has no eagle3 method (llama_eagle3.py first ships in 0.8.5): "
            "the server refuses the speculative config.",
            check="engine",
        )
        return
    kind = target.model_type
    if kind is None:
        return
    if version < VLLM_EAGLE3_ANY_LLAMA and "llama" not in kind:
        allowed = "llama"
    elif version[:2] == VLLM_EAGLE3_ANY_LLAMA[:2] and not any(
        t in kind for t in VLLM_EAGLE3_TARGETS_0_11
    ):
        allowed = ", ".join(VLLM_EAGLE3_TARGETS_0_11)
    else:
        return
    ctx.add(
        "error",
        "engine",
        f"a release that serves EAGLE-3 for model_type {kind!r}",
        str(engine),
        f"vLLM {'.'.join(map(str, version))} refuses EAGLE-3 unless the target's model_type "
        f"contains {allowed} ('Eagle3 is only supported for ... models', "
        "vllm/config/speculative.py); vLLM 0.32 and 0.34 ask the target class instead.",
        check="engine",
    )
