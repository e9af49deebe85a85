"""A reference entry found through the target when nothing about the drafter names one.

The incident that started dflashops had a drafter folder with a made-up name: nothing matched it
to the published drafter, so its three wrong keys were never compared with the right values. The
target, though, is a published model whose config says exactly what it is. When the drafter's
name, path and weights match no registry entry, the target's config is compared with each
entry's target (architecture, layer count, hidden size, vocabulary and the layer pattern, e.g.
Qwen3.5's three linear-attention layers per full one):

- exactly one entry fits: the drafter is checked against it, and a note says so and why;
- several fit (Qwen3.5-27B and Qwen3.6-27B share one architecture): the target's own name or path
  (``Qwen3.6-27B``, a hub cache folder, ``_name_or_path``) picks one when it names exactly one
  entry's target; otherwise a warning lists them and asks for ``--ref``;
- the drafter's weights contradict the entry (another layer count, another ``fc`` width): it is
  some other drafter for the same target, checked without a reference, and a note says why.

Standard library only, like the rest of the validation core.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dflashops.drafter.checks_weights import drafter_layer_indices, fc_weight
from dflashops.drafter.files import DrafterFiles, TargetFiles
from dflashops.drafter.keys import MISSING, is_int
from dflashops.drafter.registry import Match, Registry, RegistryEntry, TargetFacts
from dflashops.drafter.result import Finding

REF_KEY = "ref"
FULL = "full_attention"
SLIDING = "sliding_attention"
LINEAR = "linear_attention"
# transformers' Qwen2/Qwen3 configs: layers from max_window_layers on slide (default 28)
DEFAULT_MAX_WINDOW_LAYERS = 28


@dataclass(frozen=True)
class TargetShape:
    """What a target config says about the model, as a by-shape match compares it."""

    architectures: tuple[str, ...]
    layers: int | None
    hidden: int | None
    vocab: int | None
    layer_types: tuple[str, ...] | None

    @classmethod
    def of(cls, target: TargetFiles) -> TargetShape:
        archs = target.config.get("architectures")
        names = tuple(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else ()

        def positive(key: str) -> int | None:
            value = target.text_value(key)
            return int(value) if is_int(value) and value >= 1 else None

        layers = positive("num_hidden_layers")
        return cls(
            architectures=names,
            layers=layers,
            hidden=positive("hidden_size"),
            vocab=positive("vocab_size"),
            layer_types=target_layer_types(target, layers),
        )

    def describe(self) -> str:
        arch = "/".join(self.architectures) or "no architectures"
        kinds = describe_layers(self.layer_types) if self.layer_types else "unknown layer types"
        return f"{arch}, {self.layers} layers, hidden {self.hidden}, vocab {self.vocab}, {kinds}"


MAX_LAYERS = 4096


def target_layer_types(target: TargetFiles, layers: int | None) -> tuple[str, ...] | None:
    """The attention kind of every target layer, the way transformers resolves it.

    An explicit ``layer_types`` wins; Qwen3-Next-style configs give ``full_attention_interval``
    (layer ``i`` is full when ``(i + 1) % interval == 0``); plain Qwen2/Qwen3 configs slide from
    ``max_window_layers`` on only when ``use_sliding_window`` is true; otherwise every layer is
    full attention."""
    raw = target.text_value("layer_types")
    if isinstance(raw, list) and raw and all(isinstance(v, str) for v in raw):
        return tuple(raw)
    if raw is not MISSING or layers is None or layers > MAX_LAYERS:
        # a layer_types that is not a list of names says nothing usable; a layer count no model
        # has is not expanded layer by layer (a hostile config must not allocate billions)
        return None
    interval = target.text_value("full_attention_interval")
    if is_int(interval) and interval >= 1:
        return tuple(FULL if (i + 1) % interval == 0 else LINEAR for i in range(layers))
    window = target.text_value("sliding_window")
    if target.text_value("use_sliding_window") is True and is_int(window):
        start = target.text_value("max_window_layers")
        first = int(start) if is_int(start) else DEFAULT_MAX_WINDOW_LAYERS
        return tuple(SLIDING if i >= first else FULL for i in range(layers))
    return (FULL,) * layers


def describe_layers(kinds: tuple[str, ...]) -> str:
    """``3 linear_attention + 1 full_attention per 4 layers`` / ``all full_attention``."""
    period = _period(kinds)
    if len(set(period)) == 1:
        return f"all {period[0]}"
    counts = Counter(period)
    parts = " + ".join(f"{n} {kind}" for kind, n in counts.items())
    return f"{parts} per {len(period)} layers"


def _period(kinds: tuple[str, ...]) -> tuple[str, ...]:
    """The shortest prefix whose repetition gives ``kinds``."""
    for size in range(1, len(kinds) + 1):
        if len(kinds) % size == 0 and kinds[:size] * (len(kinds) // size) == kinds:
            return kinds[:size]
    return kinds


def fits(facts: TargetFacts, shape: TargetShape) -> bool:
    """Whether a target config is the target ``facts`` describe."""
    if not facts.shape_known or shape.layer_types is None or shape.layers is None:
        return False
    repeats = math.ceil(shape.layers / len(facts.layer_pattern))
    expected = (facts.layer_pattern * repeats)[: shape.layers]
    return (
        bool(set(facts.architectures) & set(shape.architectures))
        and facts.num_hidden_layers == shape.layers
        and facts.hidden_size == shape.hidden
        and facts.vocab_size == shape.vocab
        and tuple(expected) == shape.layer_types
    )


@dataclass(frozen=True)
class TargetMatch:
    """The entry found through the target (if exactly one), and what to tell the user."""

    match: Match | None
    findings: tuple[Finding, ...] = ()


def match_by_target(
    registry: Registry,
    drafter: DrafterFiles,
    target: TargetFiles,
    accepts: Callable[[RegistryEntry], bool] = lambda _entry: True,
) -> TargetMatch:
    """The one registry entry whose target this is (see the module doc), among the entries
    ``accepts`` lets in (the drafter's own family: an EAGLE-3 drafter is never matched to the
    DFlash drafter of the same target)."""
    shape = TargetShape.of(target)
    candidates = [e for e in registry.entries if accepts(e) and fits(e.target, shape)]
    if not candidates:
        return TargetMatch(None)
    basis = f"its target's config ({shape.describe()}) matches the target of "
    if len(candidates) > 1:
        named = _named_by_target(candidates, target)
        if named is None:
            return TargetMatch(None, (_ask_for_ref(candidates, basis),))
        entry = named
        basis += (
            f"{len(candidates)} entries ({', '.join(e.name for e in candidates)}), and the "
            f"target's name or path names {entry.target.name}"
        )
        short = f"fits {len(candidates)} entries' targets; its name picks {entry.target.name}"
    else:
        entry = candidates[0]
        basis += f"{entry.name} and of no other entry"
        short = f"fits {entry.target.name}, this entry's target alone"
    other = _weights_disagree(drafter, entry)
    if other:
        return TargetMatch(None, (_not_this_drafter(entry, basis, other),))
    detail = f"its target {target.name}: {shape.describe()}; {short}"
    return TargetMatch(Match(entry, "target", detail), (_chosen(entry, basis),))


def _norm(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.lower())


def _named_by_target(candidates: list[RegistryEntry], target: TargetFiles) -> RegistryEntry | None:
    """The one candidate whose target's name appears in the target's name, path or
    ``_name_or_path`` (``qwen36-27b`` and ``models--Qwen--Qwen3.6-27B`` both name Qwen3.6-27B)."""
    said: list[str] = [target.name, target.path or ""]
    for config in (target.config, target.config.get("text_config")):
        if isinstance(config, Mapping) and isinstance(config.get("_name_or_path"), str):
            said.append(config["_name_or_path"])
    haystack = _norm(" ".join(said))
    hits = [e for e in candidates if _norm(e.target.name.rsplit("/", 1)[-1]) in haystack]
    return hits[0] if len(hits) == 1 else None


def _weights_disagree(drafter: DrafterFiles, entry: RegistryEntry) -> str:
    """Why the drafter is evidently not ``entry``'s checkpoint ("" if nothing says so).

    The keys under check cannot decide this (they are what may be wrong), so the evidence is
    the safetensors header (a different number of layers, an ``fc`` reading another number of
    target layers, a reduced-vocabulary map) and a reduced draft vocabulary, which a drafter
    drafting the full vocabulary (every z-lab one) never declares."""
    reduced = _reduced_vocabulary(drafter, entry)
    if reduced:
        return reduced
    weights = drafter.weights
    if weights is None:
        return ""
    layers = _certain(entry, "num_hidden_layers")
    found = drafter_layer_indices(weights.tensors)
    if is_int(layers) and found and len(found) != layers:
        return f"its weights hold {len(found)} drafter layers, {entry.name} has {layers}"
    ids = _certain(entry, "dflash_config.target_layer_ids")
    fc = fc_weight(weights.tensors)
    hidden = entry.target.hidden_size
    width = fc.shape[1] if fc is not None and len(fc.shape) == 2 else None
    if isinstance(ids, list) and hidden and width is not None and width != len(ids) * hidden:
        return (
            f"its fc.weight reads {width} features, {entry.name} reads {len(ids)} target "
            f"layers × {hidden}"
        )
    return ""


def _reduced_vocabulary(drafter: DrafterFiles, entry: RegistryEntry) -> str:
    """The drafted vocabulary against the entry's: its own ``draft_vocab_size`` (EAGLE-3
    drafters reduce it), else the target's full one (every DFlash drafter)."""
    draft_vocab = drafter.checked_config.get("draft_vocab_size")
    vocab = entry.target.vocab_size
    entry_draft = _certain(entry, "draft_vocab_size")
    if is_int(entry_draft):
        if is_int(draft_vocab) and draft_vocab != entry_draft:
            return (
                f"it drafts {draft_vocab} tokens (draft_vocab_size), {entry.name} drafts "
                f"{entry_draft}"
            )
        if not vocab or entry_draft < vocab:
            return ""  # a reduced vocabulary is this entry's own
    if is_int(draft_vocab) and vocab and draft_vocab < vocab:
        return (
            f"it drafts a reduced vocabulary of {draft_vocab} tokens (draft_vocab_size), "
            f"{entry.name} the target's full {vocab}"
        )
    weights = drafter.weights
    if weights is not None and {"d2t", "t2d"} & set(weights.tensors):
        return f"its weights map a reduced vocabulary (d2t/t2d), {entry.name} drafts the full one"
    return ""


def _certain(entry: RegistryEntry, path: str) -> Any:
    known = entry.value(path)
    return known.value if known is not None and known.certain else MISSING


def _chosen(entry: RegistryEntry, basis: str) -> Finding:
    return Finding(
        "info",
        REF_KEY,
        "a reference entry for this drafter",
        f"{entry.name} (by its target)",
        f"No registry entry names this drafter by name, path or weights fingerprint; {basis}. "
        f"The drafter is checked against {entry.name}'s values. If it was trained "
        "differently, pass --ref with an entry of its own.",
        "target",
    )


def _ask_for_ref(candidates: list[RegistryEntry], basis: str) -> Finding:
    names = ", ".join(e.name for e in candidates)
    return Finding(
        "warning",
        REF_KEY,
        f"--ref NAME (one of: {names})",
        f"{len(candidates)} entries match the target",
        f"No registry entry names this drafter by name, path or weights fingerprint; {basis}"
        f"{len(candidates)} entries ({names}), which disagree on what a drafter for it holds, "
        "and the target's name picks none of them. The drafter is checked without a "
        "reference: pass --ref with the one it was published as.",
        "target",
    )


def _not_this_drafter(entry: RegistryEntry, basis: str, why: str) -> Finding:
    return Finding(
        "info",
        REF_KEY,
        f"a drafter shaped like {entry.name}",
        why,
        f"No registry entry names this drafter; {basis}, but {why}: it is another drafter for "
        "the same target, so it is checked without a reference (pass --ref to compare anyway).",
        "target",
    )
