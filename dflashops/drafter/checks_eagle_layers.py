"""Which target layers feed an EAGLE-3 drafter, as vLLM picks them, against what it was trained
on and what its ``fc`` reads.

vLLM captures the hidden state *entering* layer ``i`` for every id ``i`` (0 is the embeddings,
``N`` the last layer's output before the final norm: ``_maybe_add_hidden_state(..., idx + 1, ...)``
in vllm/model_executor/models/llama.py and qwen2.py, 0.32 and 0.34). The ids come from:

- 0.32 (its default V2 model runner) and 0.34: the top-level
  ``eagle_aux_hidden_state_layer_ids`` only (``get_eagle3_aux_layers_from_config`` in
  vllm/v1/worker/gpu/spec_decode/eagle/eagle3_utils.py); without them, the target's
  ``get_eagle3_default_aux_hidden_state_layers`` = ``(2, N // 2, N - 3)``
  (``SupportsEagle3`` in model_executor/models/interfaces.py). SGLang's nested
  ``eagle_config.eagle_aux_hidden_state_layer_ids`` is not read there;
- 0.8.5-0.11.0: no ids at all; always the target's default (gpu_model_runner.py asks the
  target's ``get_eagle3_aux_hidden_state_layers``). Releases between 0.11 and 0.32 were not
  read and are held to 0.32's reading.

vLLM sorts and de-duplicates the ids (``tuple(sorted(set(layers)))``) and concatenates the
captured states into ``fc``, which the drafter class sized from ``num_aux_hidden_states``, else
the length of ``eagle_config``'s ids (the Qwen3 class also the top-level ids), else 3
(llama_eagle3.py, qwen3_eagle3.py). SpecForge and SGLang write ``eagle_config``'s ids as layer
*outputs*, and SGLang captures id + 1 for every id (``set_eagle3_layers_to_capture`` in
srt/models/qwen3.py and llama.py of the 0.5.15 wheel and 0.5.16's sources: a real 0.5.16 server
fed ``eagle_config`` ids [0, 1, 2] the states entering layers 1, 2, 3); speculators writes
vLLM's capture indices at the top level. sgl-project/sglang#25454 (merged 2026-05-16) adds 1
only when the first id is 1, for drafters written "capture before layer X" (first id 2, as
SGLang's own default); neither release has it in those classes, so such a drafter is fed one
layer late there, which :func:`check_sglang_layers` warns of.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dflashops.drafter.checks_eagle_class import (
    QWEN3_EAGLE3,
    VLLM_AUX_IDS_READ,
    VLLM_READS_AUX_IDS,
)
from dflashops.drafter.checks_eagle_layout import (
    AUX_IDS,
    NESTED,
    EagleFile,
    EagleTarget,
)
from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import Version
from dflashops.drafter.keys import MISSING, is_int, show
from dflashops.drafter.safetensors import TensorInfo

NESTED_IDS = f"{NESTED}.{AUX_IDS}"
DEFAULT_SOURCE = (
    "the target's get_eagle3_default_aux_hidden_state_layers, (2, N // 2, N - 3) "
    "(vllm/model_executor/models/interfaces.py)"
)
_COLLAPSE = (
    "a drafter fed other layers than it was trained on drafts from features it has never "
    "seen (vllm#50170: nvidia/Llama-3.3-70B-Instruct-Eagle3 on vLLM's default layers accepted "
    "1.2 % of drafts)"
)


def default_aux_layers(num_layers: int) -> list[int]:
    return [2, num_layers // 2, num_layers - 3]


def sglang_capture(ids: list[int]) -> list[int]:
    """What SGLang 0.5.15-0.5.16 captures for ``eagle_config``'s ids: the state entering
    layer id + 1, i.e. layer id's output (the convention SpecForge trains with)."""
    return [i + 1 for i in ids]


def trained_capture(ids: list[int]) -> list[int]:
    """The states a drafter naming only ``eagle_config`` ids was trained on, in vLLM's capture
    indices: layer outputs when the first id is 1 (SpecForge), the ids themselves when it is
    written capture-before (first id 2): the two conventions sgl-project/sglang#25454 tells
    apart by the first id."""
    return [i + 1 for i in ids] if ids and ids[0] == 1 else list(ids)


@dataclass(frozen=True)
class AuxPlan:
    """What vLLM feeds the drafter and what it was trained on (None: unknown)."""

    fed: list[int] | None
    fed_from: str
    trained: list[int] | None
    trained_from: str
    fc_features: int
    fc_features_from: str


def _ids(ctx: CheckContext, key: str, raw: Any) -> list[int] | None:
    if raw is MISSING or raw is None or raw == []:
        return None  # vLLM and SGLang take an empty value as none given
    if isinstance(raw, list) and raw and all(is_int(v) for v in raw):
        return [int(v) for v in raw]
    ctx.add(
        "error",
        key,
        "a non-empty list of target layer indices",
        show(raw),
        "vLLM and SGLang capture the target's hidden states at these layers for the drafter's "
        "fc; anything else is not a layer list.",
        check="layers",
    )
    return None


def plan_aux_layers(
    ctx: CheckContext,
    cfg: EagleFile,
    target: EagleTarget,
    version: Version | None,
    drafter_class: str | None,
) -> AuxPlan:
    top = _ids(ctx, AUX_IDS, cfg.top(AUX_IDS))
    nested = _ids(ctx, NESTED_IDS, cfg.nested.get(AUX_IDS, MISSING))
    default = default_aux_layers(target.layers) if target.layers else None
    trained: list[int] | None
    if top is not None:
        trained, trained_from = top, AUX_IDS
    elif nested is not None:
        trained, trained_from = trained_capture(nested), f"{NESTED_IDS} {nested}, read as trained"
    else:
        trained, trained_from = default, "no ids: the trainers' default"
    if version is not None and version < VLLM_READS_AUX_IDS:
        fed, fed_from = default, "vLLM <= 0.11 reads no ids from the drafter: " + DEFAULT_SOURCE
    elif top is not None:
        fed, fed_from = top, AUX_IDS
    else:
        fed, fed_from = default, DEFAULT_SOURCE
    if version is not None and VLLM_READS_AUX_IDS <= version < VLLM_AUX_IDS_READ:
        fed_from += " (as vLLM 0.32 reads them; this release was not read)"
    features, features_from = _fc_features(cfg, drafter_class, top, nested)
    return AuxPlan(fed, fed_from, trained, trained_from, features, features_from)


def _fc_features(
    cfg: EagleFile, drafter_class: str | None, top: list[int] | None, nested: list[int] | None
) -> tuple[int, str]:
    """How many captured states vLLM's drafter class sizes fc for."""
    qwen3 = drafter_class == QWEN3_EAGLE3
    owner = cfg.layer if cfg.speculators else cfg.config
    keys = ("num_aux_layers", "num_aux_hidden_states") if qwen3 else ("num_aux_hidden_states",)
    for key in keys:
        value = owner.get(key)
        if is_int(value):
            return int(value), cfg.layer_key(key) if cfg.speculators else key
    if qwen3 and top is not None:
        return len(top), f"len({AUX_IDS})"
    if nested is not None:
        return len(nested), f"len({NESTED_IDS})"
    return 3, "vLLM's default of 3 (no eagle_config ids)"


def ids_key(cfg: EagleFile) -> str:
    """Where the file names the layers: the top level, else SGLang's eagle_config."""
    if not cfg.top(AUX_IDS) and cfg.nested.get(AUX_IDS):
        return NESTED_IDS
    return AUX_IDS


def check_aux_layers(ctx: CheckContext, cfg: EagleFile, target: EagleTarget, plan: AuxPlan) -> None:
    n = target.layers
    top = cfg.top(AUX_IDS)
    key = ids_key(cfg)
    if plan.fed is None or n is None:
        return
    if len(set(plan.fed)) != len(plan.fed):
        ctx.add(
            "error",
            key,
            "distinct layer ids",
            show(plan.fed),
            "vLLM keeps each layer once (tuple(sorted(set(layers))), model_executor/models/"
            "interfaces.py), so fc receives fewer hidden states than it reads and the first "
            "draft step fails on shapes.",
            check="layers",
        )
        return
    outside = [i for i in (*plan.fed, *(plan.trained or ())) if not 0 <= i <= n]
    if outside:
        ctx.add(
            "error",
            key,
            f"capture indices in 0..{n} ({n} layers, {target.layers_from})",
            show(sorted(set(outside))),
            "vLLM captures the state entering layer i (0 = the embeddings, N = the last "
            "layer's output); an index past the target is never captured, so fc receives "
            "fewer states than it reads, or the drafter was built for a deeper target.",
            check="target",
        )
        return
    if plan.trained is not None and sorted(set(plan.trained)) != sorted(set(plan.fed)):
        _fed_other_layers(ctx, key, plan, sorted(set(plan.trained)), sorted(set(plan.fed)))
    elif key == AUX_IDS and plan.fed == [d - 1 for d in default_aux_layers(n)]:
        ctx.add(
            "warning",
            key,
            show(default_aux_layers(n)),
            show(plan.fed),
            "One below vLLM's default in every place: these look like layer outputs (SGLang's "
            "and SpecForge's eagle_config convention), but vLLM reads the top-level ids as "
            "capture indices (the state entering layer i), so every feature comes one layer "
            "early. Unless this drafter was trained on exactly these capture indices, add 1.",
            check="layers",
        )
    elif not top and not cfg.nested.get(AUX_IDS):
        ctx.add(
            "info",
            AUX_IDS,
            "the layers the drafter was trained on",
            f"(missing): vLLM feeds {plan.fed}, {DEFAULT_SOURCE}",
            "Without ids vLLM uses the target's default, which is what EAGLE-3, SpecForge and "
            "speculators train on unless told otherwise. A drafter trained on other layers must "
            f"name them: {_COLLAPSE}.",
            check="layers",
        )


def _fed_other_layers(
    ctx: CheckContext, key: str, plan: AuxPlan, trained: list[int], fed: list[int]
) -> None:
    """An error when most features come from layers the drafter never saw; a warning when
    they are a layer off or mostly the same (acceptance drops by an amount nobody measured)."""
    shifted = (
        len(trained) == len(fed) and len({f - t for t, f in zip(trained, fed, strict=True)}) == 1
    )
    near = shifted and abs(fed[0] - trained[0]) == 1
    mostly_same = 2 * len(set(trained) & set(fed)) > len(trained)
    if key != AUX_IDS:
        fix = f"; set {AUX_IDS} = {trained} at the top level"
    elif plan.fed_from.startswith("vLLM <= 0.11"):
        fix = "; vLLM 0.32 and 0.34 read these ids"
    else:
        fix = ""
    ctx.add(
        "warning" if near or mostly_same else "error",
        key,
        f"{trained} (what it was trained on: {plan.trained_from})",
        f"{fed} (what vLLM feeds: {plan.fed_from})",
        f"vLLM captures these layers for the drafter but it was trained on others: {_COLLAPSE}"
        + fix
        + ".",
        check="layers",
    )


def check_fc(
    ctx: CheckContext,
    tensors: Mapping[str, TensorInfo],
    plan: AuxPlan,
    cfg: EagleFile,
    *,
    sglang: bool,
) -> None:
    """fc's width against the captured states and the class's count; its rows the hidden."""
    fed = len(set(plan.fed)) if plan.fed is not None else None
    if fed is not None and fed != plan.fc_features and not sglang:
        ctx.add(
            "error",
            ids_key(cfg),
            f"{plan.fc_features} layers ({plan.fc_features_from}, what vLLM sizes fc for)",
            f"{fed} ({plan.fed_from})",
            "vLLM's drafter class sizes fc for one count (llama_eagle3.py / qwen3_eagle3.py) "
            "and the target hands it another: combine_hidden_states fails on shapes.",
            check="layers",
        )
    declared = len(plan.trained) if plan.trained is not None else None
    if sglang and declared is not None and declared != 3:
        ctx.add(
            "error",
            ids_key(cfg),
            "3 layers",
            str(declared),
            "SGLang's LlamaForCausalLMEagle3 sizes fc for exactly three captured states "
            "(hidden_size_in * 3, python/sglang/srt/models/llama_eagle3.py).",
            check="layers",
        )
    fc = tensors.get("fc.weight") or tensors.get("model.fc.weight")
    hidden = cfg.layer_int("hidden_size")
    # the engines size fc by target_hidden_size, else the drafter's own hidden size
    own = cfg.top_int("target_hidden_size") or hidden
    features = 3 if sglang else plan.fc_features
    if fc is None or len(fc.shape) != 2 or own is None:
        return
    if fc.shape[1] != features * own:
        ctx.add(
            "error",
            "fc.weight",
            f"[…, {features * own}] = {features} layers × {own}",
            show(list(fc.shape)),
            "fc's width fixes how many target layers the checkpoint reads: the engine builds "
            f"fc for {features} (llama_eagle3.py) and loading these weights fails on shapes.",
            check="weights",
        )
    if hidden is not None and fc.shape[0] != hidden:
        ctx.add(
            "error",
            "fc.weight",
            f"[{hidden}, …] (hidden_size)",
            show(list(fc.shape)),
            "fc projects into the drafter's hidden size; the config names another, so "
            "loading fails on shapes.",
            check="weights",
        )


def check_sglang_layers(ctx: CheckContext, cfg: EagleFile, target: EagleTarget) -> None:
    """SGLang reads the capture layers from ``eagle_config`` only: without ids there it captures
    its default (2, N // 2, N - 3) whatever the top level says (qwen3.py's
    set_eagle3_layers_to_capture, 0.5.16; a real 0.5.16 server fed a 3-layer lab drafter two
    states of a 4-layer target and died on the first request: mat1 14x256, mat2 384x128)."""
    n = target.layers
    nested = _ids(ctx, NESTED_IDS, cfg.nested.get(AUX_IDS, MISSING))
    if nested is not None:
        _warn_capture_before(ctx, nested)
    if n is None or nested is not None:
        return
    fed = sorted(set(default_aux_layers(n)))
    top = _ids(ctx, AUX_IDS, cfg.top(AUX_IDS))
    fix = (
        f"write them as SGLang reads them: {NESTED_IDS} = {show([i - 1 for i in top])} "
        "(SGLang captures id + 1)"
        if top
        else f"name the layers the drafter was trained on in {NESTED_IDS}"
    )
    if len(fed) < 3:
        ctx.add(
            "error",
            NESTED_IDS,
            "the layers the drafter was trained on, for SGLang",
            f"none: SGLang captures its default {show(default_aux_layers(n))} of {n} layers",
            f"{len(fed)} distinct states reach an fc built for 3, and the first request fails on "
            f"shapes; {fix}.",
            check="layers",
        )
    elif top is not None and sorted(set(top)) != fed:
        ctx.add(
            "error",
            NESTED_IDS,
            f"{show(top)} (the top-level ids the drafter names)",
            f"none: SGLang ignores the top level and captures {show(fed)}",
            f"{_COLLAPSE}; {fix}.",
            check="layers",
        )


def _warn_capture_before(ctx: CheckContext, nested: list[int]) -> None:
    """ids written "capture before layer X" (first id 2) are fed one layer late by SGLang
    0.5.15-0.5.16, which adds 1 to every id (sgl-project/sglang#25454 reports ~0.10 accept
    length lost on such a drafter before its fix)."""
    if nested[0] != 2:
        return
    ctx.add(
        "warning",
        NESTED_IDS,
        f"{show(nested)} as this SGLang reads them: each id's output (it captures id + 1)",
        f"{show(nested)}: the first id 2 is the capture-before-layer convention (SGLang's own "
        f"default, 2, N // 2, N - 3), so SGLang feeds {show(sglang_capture(nested))}",
        "a drafter trained on the states entering those layers gets each one a layer late here "
        "(sgl-project/sglang#25454 reports ~0.10 accept length lost); if it was, write "
        f"{NESTED_IDS} = {show([i - 1 for i in nested])}.",
        check="layers",
    )
