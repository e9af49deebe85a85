"""``validate_drafter``: every way a DFlash drafter config can silently ruin acceptance.

A pure function over files already read (:mod:`dflashops.drafter.files`), standard library only:
the bundled server preflight (``dflashops/server/entry.py``) calls it inside an engine venv, where
dflashops must not depend on pydantic, click or rich. The result is plain dataclasses
(:mod:`dflashops.drafter.result`); the CLI wraps them in a pydantic report.

The rules come from z-lab's ``dflash/model.py`` and vLLM's ``qwen3_dflash.py`` (the model code
that reads these keys):

- ``target_layer_ids`` are 0-based target layers whose *outputs* the drafter reads; ``fc`` takes
  their concatenation, so ``len(ids) * target_hidden`` is the width of ``fc.weight``.
- ``layer_types[i] == "sliding_attention"`` makes layer ``i`` causal with a window; anything else
  is non-causal full attention, unless ``dflash_config.use_swa`` slides every layer (vLLM >= 0.25;
  :mod:`dflashops.drafter.checks_attention`).
- Every masked draft slot is embedded as ``dflash_config.mask_token_id``.
- The drafter predicts ``block_size - 1`` tokens per step.

The same rules check DFlash2 and DSpark drafters (both keep the DFlash backbone), with each
family's own class and modules on top (``family``): DFlash2's selector and convolutions
(:mod:`dflashops.drafter.checks_dflash2`), DSpark's Markov head and flat layout, read the way
its engines resolve it (:mod:`dflashops.drafter.checks_dspark`).

Each rule lives in one ``checks_*`` module; this one fixes their order and what they share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from dflashops.drafter.checks_attention import check_attention
from dflashops.drafter.checks_config import (
    check_architecture,
    check_block_size,
    check_dflash_config,
)
from dflashops.drafter.checks_dflash2 import check_dflash2, dflash2_key, dflash2_view
from dflashops.drafter.checks_dspark import check_dspark, dspark_key, dspark_view, mask_top_level
from dflashops.drafter.checks_mask import check_mask_token
from dflashops.drafter.checks_registry import check_registry
from dflashops.drafter.checks_shape import check_heads, check_named_block_size, check_types
from dflashops.drafter.checks_target import (
    check_num_target_layers,
    check_pairing,
    check_target_layer_ids,
)
from dflashops.drafter.checks_weights import check_weights
from dflashops.drafter.context import CheckContext, target_facts
from dflashops.drafter.engine import DrafterShape, EngineSpec, engine_findings
from dflashops.drafter.family_names import Family
from dflashops.drafter.files import DrafterFiles, TargetFiles
from dflashops.drafter.formats import (
    LAYER_CONFIG,
    SPECULATORS,
    ZLAB_ONLY,
    checked_view,
    config_format,
    file_key,
)
from dflashops.drafter.keys import MISSING, is_int, show
from dflashops.drafter.registry import RegistryEntry
from dflashops.drafter.result import CheckResult, Finding, merge_by_key


def validate_drafter(
    drafter: DrafterFiles,
    target: TargetFiles | None = None,
    ref: RegistryEntry | None = None,
    engine: EngineSpec | None = None,
    k: int | None = None,
    *,
    family: Family = "dflash",
) -> CheckResult:
    """Check ``drafter`` alone, against its ``target``, a reference entry and an engine version,
    by the rules of ``family`` (dflash, dflash2 or dspark).

    ``k`` is the ``num_speculative_tokens`` the server will run with. Never raises for bad
    values: every problem becomes a finding (one per key, most severe first)."""
    original = drafter.config
    view = VIEWS.get(family)
    if view is not None:
        drafter = replace(drafter, config=view(original))
    ctx = CheckContext(drafter=drafter, target=target, ref=ref, k=k)
    check_architecture(ctx, family)
    layers = ctx.config_int(
        "num_hidden_layers",
        missing="error",
        why_missing="Without it transformers' Qwen3Config builds its default 32 layers, not "
        "the checkpoint's.",
    )
    hidden = ctx.config_int(
        "hidden_size",
        missing="error",
        why_missing="Without it transformers' Qwen3Config assumes 4096; the drafter must match "
        "the target's hidden size.",
    )
    vocab = ctx.config_int(
        "vocab_size",
        missing="error",
        why_missing="Without it transformers' Qwen3Config assumes 151936; the drafter must use "
        "the target's vocabulary.",
    )
    check_types(ctx)
    check_heads(ctx)
    shape = check_attention(ctx, layers)
    dflash_ok = check_dflash_config(ctx)
    facts = target_facts(ctx, hidden)
    ids = check_target_layer_ids(ctx, facts, dflash_ok, layers)
    check_pairing(ctx, facts, hidden, vocab)
    check_num_target_layers(ctx, facts, ids)
    check_mask_token(ctx, dflash_ok, vocab, facts.vocab, facts.vocab_from)
    check_block_size(ctx)
    check_named_block_size(ctx)
    check_weights(ctx, layers, hidden, ids, facts, family=family)
    if family == "dflash2":
        check_dflash2(ctx, hidden, vocab)
    elif family == "dspark":
        check_dspark(ctx)
    if ref is not None:
        check_registry(ctx, ref, shape)
    env: dict[str, str] = {}
    if engine is not None:
        found, env = engine_findings(engine, _with_files(shape, original), family)
        ctx.findings.extend(found)
    return CheckResult.of(merge_by_key(_named(ctx, original, family)), env)


# the layout each family's rules read, built from the file (the DFlash one is the file itself)
VIEWS: Mapping[Family, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "dflash2": dflash2_view,
    "dspark": dspark_view,
}


def _with_files(shape: DrafterShape, config: Mapping[str, Any]) -> DrafterShape:
    """The engine-facing facts only the file itself tells (its class, its mask's place)."""
    archs = config.get("architectures")
    speculators = config_format(config) == SPECULATORS
    # what the engine is given: a z-lab file as it is, a speculators file's z-lab view (its
    # layer config at the top level, as dflashops serves it to SGLang)
    view = checked_view(config)
    model_type = view.get("model_type")
    return replace(
        shape,
        architectures=tuple(a for a in archs if isinstance(a, str))
        if isinstance(archs, list)
        else (),
        model_type=model_type if isinstance(model_type, str) else None,
        mask_top_level=mask_top_level(config),
        speculators=speculators,
        speculators_non_causal=_non_causal_key(config) if speculators else None,
        **_layer_bound_facts(view),
    )


def _non_causal_key(config: Mapping[str, Any]) -> bool | None:
    value = config.get("sliding_window_non_causal")
    return value if isinstance(value, bool) else None


def _layer_bound_facts(view: Mapping[str, Any]) -> dict[str, Any]:
    """The ids, the drafter's layer count and num_target_layers as SGLang resolves them
    (``dflash_config`` first, then the top level); values of the wrong type count as absent."""
    nested = view.get("dflash_config")
    nested = nested if isinstance(nested, Mapping) else {}
    ids = nested.get("target_layer_ids")
    bound = nested.get("num_target_layers", view.get("num_target_layers"))
    layers = view.get("num_hidden_layers")
    return {
        "target_layer_ids": tuple(ids) if isinstance(ids, list) and all(map(is_int, ids)) else (),
        "layers": layers if is_int(layers) else None,
        "num_target_layers": bound if is_int(bound) else None,
    }


def _named(ctx: CheckContext, config: Mapping[str, Any], family: Family) -> list[Finding]:
    """Each finding under the key the file holds it by."""
    if family == "dspark":
        return [replace(f, key=dspark_key(f.key, config)) for f in ctx.findings]
    if family == "dflash2" and config.get("speculators_model_type") == "dflash2":
        return [replace(f, key=dflash2_key(f.key, config)) for f in ctx.findings]
    if ctx.drafter.format == SPECULATORS:
        return speculators_findings(ctx.drafter.config, ctx.findings)
    return ctx.findings


def speculators_findings(config: Mapping[str, Any], findings: list[Finding]) -> list[Finding]:
    """Findings of a speculators-layout config: each named where the file holds it, and what
    the engine needs that only this layout can lack (its nested layer config)."""
    named = [
        replace(f, key=file_key(f.key, config))
        for f in findings
        if not (f.key in ZLAB_ONLY and f.found == "(missing)")
    ]
    if not isinstance(config.get(LAYER_CONFIG), Mapping):
        named.append(
            Finding(
                "error",
                LAYER_CONFIG,
                "an object: the drafter's Qwen3 layer config",
                show(config.get(LAYER_CONFIG, MISSING)),
                "vLLM builds a speculators-format drafter from this object and refuses to load "
                "one without it.",
                "config",
            )
        )
    return named
