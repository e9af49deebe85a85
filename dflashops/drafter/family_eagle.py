"""The EAGLE-3 and EAGLE families: a drafter that reads the target's hidden states through
``fc`` and drafts one token per step.

The rules follow the engine version (``--engine``; without one, vLLM 0.34, the playbook's
default) and each cites the engine code that makes it matter:

- the drafter class the engine builds (:mod:`~dflashops.drafter.checks_eagle_class`);
- the target layers it is fed, against what it was trained on and what ``fc`` reads
  (:mod:`~dflashops.drafter.checks_eagle_layers`);
- its hidden size against the target's, its decoder layers and heads against its weights
  (:mod:`~dflashops.drafter.checks_eagle_shape`);
- its vocabularies and the draft-to-target map (:mod:`~dflashops.drafter.checks_eagle_vocab`);
- the tokenizer it was trained with (:mod:`~dflashops.drafter.checks_eagle_tokenizer`);
- and the reference entry's values, when the entry is of its family.

Standard library only.
"""

from __future__ import annotations

from dflashops.drafter.checks_eagle_class import check_drafter_class, check_vllm_release
from dflashops.drafter.checks_eagle_layers import (
    check_aux_layers,
    check_fc,
    check_sglang_layers,
    plan_aux_layers,
)
from dflashops.drafter.checks_eagle_layout import EagleFile, eagle_target, vllm_version
from dflashops.drafter.checks_eagle_shape import (
    check_eagle_fc,
    check_hidden,
    check_layers_and_heads,
)
from dflashops.drafter.checks_eagle_tokenizer import check_tokenizer
from dflashops.drafter.checks_eagle_vocab import check_tied_head, check_vocab, check_vocab_map
from dflashops.drafter.checks_registry import check_registry
from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import DrafterShape
from dflashops.drafter.families import CheckInputs
from dflashops.drafter.family_names import Family
from dflashops.drafter.files import DrafterFiles
from dflashops.drafter.registry import RegistryEntry
from dflashops.drafter.result import CheckResult, Finding, merge_by_key
from dflashops.drafter.unchecked import no_files


def validate_eagle3(inputs: CheckInputs) -> CheckResult:
    if inputs.drafter is None:
        return no_files("eagle3")
    ctx, notes = _context(inputs, inputs.drafter, "eagle3")
    cfg = EagleFile(inputs.drafter.config)
    engine, version = inputs.engine, vllm_version(inputs.engine)
    target = eagle_target(ctx)
    drafter_class = check_drafter_class(ctx, cfg, engine, eagle3=True)
    check_vllm_release(ctx, engine, target, eagle3=True)
    weights = inputs.drafter.weights
    tensors = weights.tensors if weights is not None else None
    hidden = check_hidden(ctx, cfg, target, tensors, eagle3=True)
    sizes = check_vocab(ctx, cfg, target)
    # eagle_config.use_aux_hidden_state: false runs EAGLE-3 on the last hidden state, no fc
    # (vllm/v1/worker/gpu/spec_decode/eagle/config.py)
    uses_aux = cfg.nested.get("use_aux_hidden_state", True) is not False
    plan = plan_aux_layers(ctx, cfg, target, version, drafter_class)
    if uses_aux and version is not None:
        check_aux_layers(ctx, cfg, target, plan)
    elif uses_aux and engine is not None and engine.name == "sglang":
        check_sglang_layers(ctx, cfg, target)
    check_tokenizer(ctx, cfg)
    check_tied_head(ctx, cfg, sizes, engine)
    if tensors is None:
        ctx.findings.append(_no_weights("fc width, the draft-to-target map"))
    else:
        check_layers_and_heads(ctx, cfg, tensors, hidden, eagle3=True)
        if uses_aux:
            check_fc(ctx, tensors, plan, cfg, sglang=version is None)
        if sizes is not None:
            check_vocab_map(ctx, tensors, sizes, target, hidden)
    return _finish(ctx, notes)


def validate_eagle(inputs: CheckInputs) -> CheckResult:
    if inputs.drafter is None:
        return no_files("eagle")
    ctx, notes = _context(inputs, inputs.drafter, "eagle")
    cfg = EagleFile(inputs.drafter.config)
    target = eagle_target(ctx)
    if cfg.speculators:
        ctx.add(
            "error",
            "speculators_model_type",
            "the HF layout (vLLM reads no speculators-layout EAGLE drafter)",
            str(cfg.config.get("speculators_model_type")),
            "vLLM 0.34 converts only eagle3, dflash, dflash2 and dspark speculators checkpoints "
            "(transformers_utils/configs/speculators/algos.py) and refuses the rest.",
            check="class",
        )
    check_drafter_class(ctx, cfg, inputs.engine, eagle3=False)
    weights = inputs.drafter.weights
    tensors = weights.tensors if weights is not None else None
    hidden = check_hidden(ctx, cfg, target, tensors, eagle3=False)
    check_vocab(ctx, cfg, target)
    check_tokenizer(ctx, cfg)
    if tensors is None:
        ctx.findings.append(_no_weights("fc's shape and bias"))
        if vllm_version(inputs.engine) is not None:
            _check_declared_bias(ctx, cfg)
    else:
        check_layers_and_heads(ctx, cfg, tensors, hidden, eagle3=False)
        check_eagle_fc(ctx, tensors, hidden)
    return _finish(ctx, notes)


def _context(
    inputs: CheckInputs, drafter: DrafterFiles, family: Family
) -> tuple[CheckContext, list[Finding]]:
    """The check's state, with the reference only when it is an entry of this family (another
    family's values describe another kind of drafter)."""
    ref: RegistryEntry | None = inputs.ref
    notes: list[Finding] = []
    if ref is not None and ref.family != family:
        notes.append(
            Finding(
                "warning",
                "ref",
                f"a {family} entry",
                f"{ref.name} (a {ref.family} entry)",
                f"Its values describe a {ref.family} drafter, so the drafter is checked without "
                f"a reference; pass --ref with a {family} entry.",
                "registry",
            )
        )
        ref = None
    return CheckContext(drafter=drafter, target=inputs.target, ref=ref, k=inputs.k), notes


def _finish(ctx: CheckContext, notes: list[Finding]) -> CheckResult:
    if ctx.ref is not None:
        check_registry(ctx, ctx.ref, DrafterShape())
    return CheckResult.of(merge_by_key([*ctx.findings, *notes]), {})


def _no_weights(what: str) -> Finding:
    return Finding(
        "info",
        "weights",
        "model.safetensors (or shards) next to config.json",
        "(none)",
        f"Without the safetensors header the decoder layers, head counts, {what} are not "
        "checked against the config.",
        "weights",
    )


def _check_declared_bias(ctx: CheckContext, cfg: EagleFile) -> None:
    """EAGLE's own code builds fc with a bias unless the config says ``bias: false``
    (SafeAILab/EAGLE eagle/model/ea_model.py); vLLM's has none to load it into."""
    if cfg.config.get("bias") is False:
        return
    ctx.add(
        "warning",
        "bias",
        "false",
        str(cfg.config.get("bias", "(missing)")),
        "EAGLE's code trains fc with a bias unless the config says bias: false "
        "(SafeAILab/EAGLE eagle/model/ea_model.py, cnets1.py); vLLM's EAGLE fc has none "
        "(llama_eagle.py), so such a checkpoint fails to load; without the weights only the "
        "config can say which it is.",
        check="weights",
    )
