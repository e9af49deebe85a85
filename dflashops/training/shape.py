"""The drafter a run trains: each key from the playbook, else the registry, else the target.

``train.drafter`` in the playbook wins. A key it leaves out comes from the registry entry that
describes this target's drafter (the playbook's ``drafter.ref``, else the one entry whose target
is this model), and failing that from the target itself:

- ``num_layers``: 1 (the smallest DFlash drafter; z-lab's published ones use 1 to 5);
- ``block_size``: 8, the ``speculators`` default, or k + 1 when the playbook serves a larger k;
- ``target_layer_ids``: z-lab's even spread over the target's ``num_hidden_layers`` (one id per
  drafter layer), the rule ``drafter check`` compares against;
- ``mask_token_id``: the tokenizer's special ``mask`` token, else the first id past the
  tokenizer's last one when the embedding has room (what z-lab's Qwen3 drafters use);
- ``layer_types``: ``sliding_attention`` for every layer (the ``speculators`` default).

Every value keeps its source, so ``--dry-run`` can say where each one came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from dflashops.drafter.checks_target import even_spread
from dflashops.drafter.files import TargetFiles
from dflashops.drafter.keys import is_int
from dflashops.drafter.registry import Registry, RegistryEntry
from dflashops.errors import PlaybookError
from dflashops.playbook.models import Playbook
from dflashops.playbook.train import TrainDrafterShape
from dflashops.training.job import DrafterShape, LayerType

T = TypeVar("T")
DEFAULT_LAYERS = 1
SPECULATORS_BLOCK_SIZE = 8
DEFAULT_LAYER_TYPE: LayerType = "sliding_attention"


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A value and where it came from (playbook, registry NAME, target …, default)."""

    value: T
    source: str


@dataclass(frozen=True)
class ResolvedShape:
    num_layers: Sourced[int]
    block_size: Sourced[int]
    target_layer_ids: Sourced[tuple[int, ...]]
    mask_token_id: Sourced[int]
    layer_types: Sourced[LayerType]

    def to_job(self) -> DrafterShape:
        return DrafterShape(
            num_layers=self.num_layers.value,
            block_size=self.block_size.value,
            target_layer_ids=self.target_layer_ids.value,
            mask_token_id=self.mask_token_id.value,
            layer_types=self.layer_types.value,
        )

    def rows(self) -> list[tuple[str, Any, str]]:
        """(key, value, source) per key, in the playbook's order."""
        return [
            ("num_layers", self.num_layers.value, self.num_layers.source),
            ("block_size", self.block_size.value, self.block_size.source),
            ("target_layer_ids", list(self.target_layer_ids.value), self.target_layer_ids.source),
            ("mask_token_id", self.mask_token_id.value, self.mask_token_id.source),
            ("layer_types", self.layer_types.value, self.layer_types.source),
        ]


def registry_entry_for(book: Playbook, registry: Registry) -> RegistryEntry | None:
    """The playbook's ``drafter.ref``, else the one entry whose target is this model (by hub
    repo id or by the model folder's name); None when there is no such single entry."""
    if book.drafter.ref:
        return registry.resolve(book.drafter.ref)
    names = {book.model.path.name.lower()}
    if book.model.repo:
        names.add(book.model.repo.lower())
    hits = [
        entry
        for entry in registry.entries
        if entry.target.name.lower() in names
        or entry.target.name.rsplit("/", 1)[-1].lower() in names
    ]
    return hits[0] if len(hits) == 1 else None


def resolve_shape(
    given: TrainDrafterShape,
    entry: RegistryEntry | None,
    target: TargetFiles | None,
    *,
    k: int | None = None,
) -> ResolvedShape:
    """Every key of the drafter's shape, with its source (see the module doc for the order)."""
    where = f"registry {entry.name}" if entry else ""

    def from_entry(*paths: str) -> Any:
        for path in paths:
            known = entry.value(path) if entry else None
            if known is not None:
                return known.value
        return None

    layers = _first(given.num_layers, "playbook", _int(from_entry("num_hidden_layers")), where)
    num_layers = layers or Sourced(DEFAULT_LAYERS, "default: one drafter layer")
    block = _first(
        given.block_size,
        "playbook",
        _int(from_entry("block_size", "dflash_config.block_size")),
        where,
    )
    if block is None:
        wanted = max(SPECULATORS_BLOCK_SIZE, (k or 0) + 1)
        why = "speculators' default" if wanted == SPECULATORS_BLOCK_SIZE else f"k={k} + 1"
        block = Sourced(wanted, f"default: {why}")
    ids = _first(
        tuple(given.target_layer_ids) if given.target_layer_ids else None,
        "playbook",
        _ids(from_entry("dflash_config.target_layer_ids")),
        where,
    )
    mask = _first(
        given.mask_token_id, "playbook", _int(from_entry("dflash_config.mask_token_id")), where
    )
    kinds: Sourced[LayerType] | None = _first(
        given.layer_types, "playbook", _one_kind(from_entry("layer_types")), where
    )
    return ResolvedShape(
        num_layers=num_layers,
        block_size=block,
        target_layer_ids=ids or _spread(target, num_layers.value),
        mask_token_id=mask or _mask_from_tokenizer(target),
        layer_types=kinds or Sourced(DEFAULT_LAYER_TYPE, "default: speculators' default"),
    )


def _first(given: T | None, given_from: str, known: T | None, known_from: str) -> Sourced[T] | None:
    if given is not None:
        return Sourced(given, given_from)
    if known is not None:
        return Sourced(known, known_from)
    return None


def _int(value: Any) -> int | None:
    return int(value) if is_int(value) else None


def _ids(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, list) and value and all(is_int(v) for v in value):
        return tuple(int(v) for v in value)
    return None


def _one_kind(value: Any) -> LayerType | None:
    """One attention kind from an entry's ``layer_types`` list (a mixed list gives none)."""
    if isinstance(value, list) and value and len(set(value)) == 1:
        kind = value[0]
        if kind in ("sliding_attention", "full_attention"):
            return kind  # type: ignore[no-any-return]
    return None


def _layers_of(target: TargetFiles | None) -> int | None:
    return _int(target.text_value("num_hidden_layers")) if target else None


def _spread(target: TargetFiles | None, count: int) -> Sourced[tuple[int, ...]]:
    layers = _layers_of(target)
    if layers is None:
        raise _missing("target_layer_ids", "the target's config has no num_hidden_layers")
    ids = tuple(even_spread(layers, count))
    if max(ids) >= layers or min(ids) < 0:
        raise _missing("target_layer_ids", f"no even spread of {count} in {layers} layers")
    return Sourced(ids, f"target: z-lab's spread over its {layers} layers")


def _mask_from_tokenizer(target: TargetFiles | None) -> Sourced[int]:
    tokenizer = target.tokenizer if target else None
    if tokenizer is None:
        raise _missing("mask_token_id", "the target has no tokenizer files to choose one from")
    for token_id, token in sorted(tokenizer.added.items()):
        if token.special and "mask" in token.content.lower():
            return Sourced(token_id, f"target tokenizer: special token {token.content}")
    vocab = _int(target.text_value("vocab_size")) if target else None
    past = tokenizer.size
    if vocab is not None and past < vocab:
        return Sourced(past, f"target tokenizer: first unused id (vocab_size {vocab})")
    raise _missing("mask_token_id", "the tokenizer has no mask token and no unused id")


def _missing(key: str, why: str) -> PlaybookError:
    return PlaybookError(
        f"{why}: cannot choose the drafter's {key}",
        source="playbook",
        key=f"train.drafter.{key}",
        hint=f"set train.drafter.{key} in the playbook",
    )
