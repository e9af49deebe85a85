"""Reference drafter configs with provenance, and matching a drafter to one.

Entries are JSON files in ``dflashops/drafter/registry/`` (schema in its README.md); users add
their own with ``--registry PATH`` or name one file with ``--ref FILE``. Every value carries its
sources, a ``basis`` (how it is known) and ``certain``. Only certain values turn a difference into
an error, and only certain values are ever written by ``corrected_config``. A source is a
description that starts with the URL an operator opens to see it (findings quote the URL).

An installed package may offer entries of its own through the ``dflashops.drafter_registry``
entry point (the lab offers its tiny drafter so). They answer an explicit ref only, like an entry
file: they are never matched by name, path or weights, and never named to a container, whose
wheel carries the bundled entries alone.

``target`` may also give ``architectures`` and ``layer_pattern`` (one period of the target's
``layer_types``); with the three sizes they let a drafter nothing names be matched through its
target's config (:mod:`dflashops.drafter.target_match`).

Standard library only, like the rest of the validation core.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata, resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

from dflashops.drafter.family_names import FAMILIES, Family
from dflashops.drafter.files import DrafterFiles, expand_user, read_json_object
from dflashops.drafter.keys import is_int
from dflashops.drafter.registry_fields import (
    BASES,
    Basis,
    ExpectedAcceptance,
    TrainedFor,
    expected_acceptance,
    known_sources,
    only,
    strings,
    text,
    trained_for,
)
from dflashops.errors import DrafterError

SCHEMA = 1
#: entry point group: each point names a package whose folder holds entry files
OFFERED_GROUP = "dflashops.drafter_registry"

# A value may be certain only on one of these bases, and (unless read from the original file or
# fixed by the target) only when at least two sources back it.
CERTAIN_BASES = frozenset({"original", "agreed", "structural", "rule"})
WHEN = frozenset({"sliding"})
MatchedBy = Literal["ref", "name", "path", "fingerprint", "target"]

_ENTRY_FIELDS = {
    "schema",
    "name",
    "aliases",
    "summary",
    "provenance",
    "sources",
    "target",
    "keys",
    "fingerprints",
    "expected_acceptance",
    "trained_for",
    "family",
}
_TARGET_FIELDS = {
    "name",
    "architectures",
    "num_hidden_layers",
    "hidden_size",
    "vocab_size",
    "layer_pattern",
    "sources",
}
_VALUE_FIELDS = {"value", "certain", "basis", "sources", "why", "read_from", "when", "note"}


@dataclass(frozen=True)
class RefValue:
    """What a reference knows about one key.

    ``path`` is where a corrected config writes the key when it is absent; ``read_from`` lists
    every place engines read it, in precedence order (``block_size`` may sit in ``dflash_config``).
    ``when="sliding"``: the key only matters once the drafter has a sliding layer."""

    path: str
    value: Any
    certain: bool
    basis: Basis
    sources: tuple[str, ...]
    why: str
    read_from: tuple[str, ...]
    when: str | None = None
    note: str = ""


@dataclass(frozen=True)
class TargetFacts:
    """The target model a reference drafter was trained for.

    ``architectures`` and ``layer_pattern`` (the target's ``layer_types``, one period of it:
    ``[linear, linear, linear, full]`` for Qwen3.5, ``[full]`` for a plain Qwen3) let a drafter
    be matched to this entry by its target's config alone (:mod:`dflashops.drafter.target_match`);
    an entry without them, or without the three sizes, is never matched that way."""

    name: str
    num_hidden_layers: int | None
    hidden_size: int | None
    vocab_size: int | None
    sources: tuple[str, ...]
    architectures: tuple[str, ...] = ()
    layer_pattern: tuple[str, ...] = ()

    @property
    def shape_known(self) -> bool:
        """Whether every fact a by-shape match compares is stated."""
        return bool(
            self.architectures
            and self.layer_pattern
            and self.num_hidden_layers
            and self.hidden_size
            and self.vocab_size
        )


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    aliases: tuple[str, ...]
    summary: str
    provenance: str
    sources: Mapping[str, str]
    target: TargetFacts
    keys: tuple[RefValue, ...]
    fingerprints: Mapping[str, str]
    file: str
    expected_acceptance: tuple[ExpectedAcceptance, ...] = ()
    trained_for: TrainedFor | None = None
    family: Family = "dflash"  # whose rules check a drafter against it

    def value(self, path: str) -> RefValue | None:
        return next((k for k in self.keys if k.path == path), None)

    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass(frozen=True)
class Match:
    entry: RegistryEntry
    by: MatchedBy
    detail: str


@dataclass(frozen=True)
class Registry:
    entries: tuple[RegistryEntry, ...]

    def find(self, name: str) -> RegistryEntry | None:
        """The entry called ``name`` (or an alias, or ``org/``-less name), case-insensitively."""
        wanted = _norm(name)
        for entry in self.entries:
            for known in entry.names():
                if wanted in {_norm(known), _norm(known.rsplit("/", 1)[-1])}:
                    return entry
        return None

    def resolve(self, ref: str) -> RegistryEntry:
        """``--ref``: an entry name, a path to an entry file, or an offered entry's name."""
        entry = self.find(ref)
        if entry is not None:
            return entry
        path = expand_user(ref)
        try:
            is_file = path.is_file()
        except (OSError, ValueError):  # a name no file can have (too long): not a path
            is_file = False
        if is_file:
            return load_entry(path)
        offered = offered_registry()
        entry = offered.find(ref)
        if entry is not None:
            return entry
        known = ", ".join(e.name for e in (*self.entries, *offered.entries)) or "none"
        raise DrafterError(
            f"no reference drafter {ref[:80]!r}", hint=f"known: {known}; or pass an entry file"
        )

    def match(self, drafter: DrafterFiles) -> Match | None:
        """The entry this drafter is, by ``_name_or_path``, its name or path, or its weights."""
        name_or_path = drafter.config.get("_name_or_path")
        if isinstance(name_or_path, str) and name_or_path:
            entry = self._find_in_path(name_or_path)
            if entry is not None:
                return Match(entry, "name", f"_name_or_path {name_or_path}")
        entry = self.find(drafter.name)
        if entry is not None:
            return Match(entry, "name", f"name {drafter.name}")
        if drafter.path:
            entry = self._find_in_path(drafter.path)
            if entry is not None:
                return Match(entry, "path", f"path {drafter.path}")
        if drafter.weights is not None:
            digest = drafter.weights.fingerprint
            hits = [e for e in self.entries if digest in e.fingerprints]
            # one layout can serve several drafters (layer_types are not in the weights)
            if len(hits) == 1:
                return Match(hits[0], "fingerprint", f"weights {digest[:19]}…")
        return None

    def _find_in_path(self, text: str) -> RegistryEntry | None:
        """A name in a path: any component, or a hub cache folder ``models--org--name``."""
        parts = [p for p in re.split(r"[\\/]", text) if p]
        candidates = [text]
        for part in reversed(parts):
            if part.startswith("models--"):
                candidates.append(part.removeprefix("models--").replace("--", "/"))
            candidates.append(part)
        for candidate in candidates:
            entry = self.find(candidate)
            if entry is not None:
                return entry
        return None


def _norm(name: str) -> str:
    return name.strip().strip("/").lower()


def load_registry(extra: Iterable[Path] = ()) -> Registry:
    """The bundled entries plus entry files (or folders of them) in ``extra``."""
    entries = _folder_entries(resources.files("dflashops.drafter").joinpath("registry"))
    for path in extra:
        files = sorted(path.glob("*.json")) if path.is_dir() else [path]
        entries.extend(load_entry(f) for f in files)
    return _unique_names(entries)


def offered_registry() -> Registry:
    """The entries installed packages offer through the ``OFFERED_GROUP`` entry point."""
    entries: list[RegistryEntry] = []
    for point in sorted(metadata.entry_points(group=OFFERED_GROUP), key=lambda p: p.name):
        try:
            folder = resources.files(point.value)
        except ModuleNotFoundError:
            continue  # named by the metadata but left out of this install (a container's wheel)
        entries.extend(_folder_entries(folder))
    return _unique_names(entries)


def _folder_entries(folder: Traversable) -> list[RegistryEntry]:
    entries: list[RegistryEntry] = []
    for item in sorted(folder.iterdir(), key=lambda p: p.name):
        if item.name.endswith(".json"):
            with resources.as_file(item) as path:
                entries.append(load_entry(path))
    return entries


def _unique_names(entries: list[RegistryEntry]) -> Registry:
    seen: dict[str, str] = {}
    for entry in entries:
        for name in entry.names():
            key = _norm(name)
            if key in seen:
                raise DrafterError(f"{entry.file}: name {name!r} is also used by {seen[key]}")
            seen[key] = entry.file
    return Registry(tuple(entries))


def load_entry(path: Path) -> RegistryEntry:
    """One entry file, checked strictly: an unknown field or a certain value without backing is
    an error, so a typo cannot silently weaken a check."""
    data = read_json_object(path, "registry entry")
    return parse_entry(data, str(path))


def parse_entry(data: Mapping[str, Any], source: str) -> RegistryEntry:
    def bad(where: str, why: str) -> DrafterError:
        return DrafterError(f"{source}: {where}: {why}")

    only(data, _ENTRY_FIELDS, source, "entry")
    if data.get("schema") != SCHEMA:
        raise bad("schema", f"must be {SCHEMA}")
    sources = data.get("sources")
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        raise bad("sources", "must be an object of id -> description")
    target = data.get("target")
    if not isinstance(target, dict):
        raise bad("target", "must be an object")
    only(target, _TARGET_FIELDS, source, "target")
    keys = data.get("keys")
    if not isinstance(keys, dict) or not keys:
        raise bad("keys", "must be a non-empty object")
    family = data.get("family", "dflash")
    if family not in FAMILIES:
        raise bad("family", f"one of {', '.join(FAMILIES)}")
    fingerprints = data.get("fingerprints", {})
    if not isinstance(fingerprints, dict) or not all(
        isinstance(k, str) and k.startswith("sha256:") and isinstance(v, str)
        for k, v in fingerprints.items()
    ):
        raise bad("fingerprints", 'must map "sha256:…" to a note on where it was hashed')
    return RegistryEntry(
        name=text(data, "name", source),
        aliases=strings(data.get("aliases", []), source, "aliases"),
        summary=text(data, "summary", source),
        provenance=text(data, "provenance", source),
        sources=dict(sources),
        target=TargetFacts(
            name=text(target, "name", source),
            num_hidden_layers=_opt_int(target, "num_hidden_layers", source),
            hidden_size=_opt_int(target, "hidden_size", source),
            vocab_size=_opt_int(target, "vocab_size", source),
            sources=known_sources(target.get("sources", []), sources, source, "target.sources"),
            architectures=strings(target.get("architectures", []), source, "target.architectures"),
            layer_pattern=strings(target.get("layer_pattern", []), source, "target.layer_pattern"),
        ),
        keys=tuple(_ref_value(path, raw, sources, source) for path, raw in keys.items()),
        fingerprints=dict(fingerprints),
        file=source,
        family=family,
        expected_acceptance=expected_acceptance(
            data.get("expected_acceptance", []), sources, source
        ),
        trained_for=trained_for(data.get("trained_for"), sources, source),
    )


def _ref_value(path: str, raw: Any, sources: Mapping[str, str], source: str) -> RefValue:
    where = f"keys.{path}"
    if not isinstance(raw, dict):
        raise DrafterError(f"{source}: {where}: must be an object")
    only(raw, _VALUE_FIELDS, source, where)
    if "value" not in raw:
        raise DrafterError(f"{source}: {where}: has no value")
    certain, basis = raw.get("certain"), raw.get("basis")
    if not isinstance(certain, bool):
        raise DrafterError(f"{source}: {where}.certain: must be true or false")
    if basis not in BASES:
        raise DrafterError(f"{source}: {where}.basis: must be one of {', '.join(BASES)}")
    backing = known_sources(raw.get("sources", []), sources, source, f"{where}.sources")
    if certain and (
        basis not in CERTAIN_BASES or (basis not in {"original", "structural"} and len(backing) < 2)
    ):
        raise DrafterError(
            f"{source}: {where}: certain needs basis original/structural, or agreed/rule with "
            "at least two sources"
        )
    when = raw.get("when")
    if when is not None and when not in WHEN:
        raise DrafterError(f"{source}: {where}.when: must be one of {', '.join(sorted(WHEN))}")
    read_from = strings(raw.get("read_from", [path]), source, f"{where}.read_from")
    if path not in read_from:
        raise DrafterError(f"{source}: {where}.read_from: must include {path}")
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise DrafterError(f"{source}: {where}.note: must be a string")
    return RefValue(
        path=path,
        value=raw["value"],
        certain=certain,
        basis=basis,
        sources=backing,
        why=text(raw, "why", f"{source}: {where}"),
        read_from=read_from,
        when=when,
        note=note,
    )


def _opt_int(data: Mapping[str, Any], key: str, source: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not is_int(value) or value < 1:
        raise DrafterError(f"{source}: target.{key}: must be a positive integer")
    return int(value)
