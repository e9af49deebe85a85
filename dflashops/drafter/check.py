"""From command-line locations to a result: read, match a reference, validate (or diff).

Standard library only, so the server preflight can run exactly what ``drafter check`` runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from dflashops.drafter.diff import DiffLine, diff_against_entry, diff_configs
from dflashops.drafter.engine import EngineSpec
from dflashops.drafter.families import (
    CheckInputs,
    Family,
    detect_family,
    method_family,
    weights_family,
)
from dflashops.drafter.files import (
    CONFIG_FILE,
    DrafterFiles,
    TargetFiles,
    read_drafter,
    read_json_object,
    read_target,
)
from dflashops.drafter.formats import SPECULATORS, ZLAB_ONLY, file_key
from dflashops.drafter.methods import validate_method
from dflashops.drafter.registry import Match, RegistryEntry, load_registry, parse_entry
from dflashops.drafter.result import CheckResult, Finding
from dflashops.drafter.target_match import match_by_target


@dataclass(frozen=True)
class CheckRun:
    """Everything one check looked at, and its result."""

    drafter: DrafterFiles
    target: TargetFiles | None
    match: Match | None
    engine: EngineSpec | None
    k: int | None
    result: CheckResult


def check_paths(
    drafter: str,
    *,
    target: str | None = None,
    ref: str | None = None,
    engine: EngineSpec | None = None,
    k: int | None = None,
    registry_paths: Iterable[Path] = (),
    method: str | None = None,
    params: Mapping[str, Any] | None = None,
) -> CheckRun:
    """``drafter check``: ``ref`` (a name or entry file) wins; otherwise the drafter is matched
    to a registry entry by name, path or weights fingerprint, else by its target's config
    (:mod:`dflashops.drafter.target_match`); unmatched drafters are checked without one.
    ``method`` (the playbook's) picks the family's rules; without it the drafter's own files do
    (:mod:`dflashops.drafter.methods`). Unreadable inputs raise ``DrafterError``."""
    registry = load_registry(registry_paths)
    files = read_drafter(drafter)
    target_files = read_target(target) if target else None
    family = method_family(method) if method else files_family(files)
    match = Match(registry.resolve(ref), "ref", f"--ref {ref}") if ref else registry.match(files)
    if match is not None and not ref and family is not None and not _fits(match.entry, family):
        match = None  # a name shared with another family's entry (an MTP target, say)
    notes: tuple[Finding, ...] = ()
    if match is None and target_files is not None:
        by_target = match_by_target(registry, files, target_files, _own_family(family))
        match, notes = by_target.match, by_target.findings
    if family is None and match is not None:  # the files do not say: the entry does
        family = match.entry.family
    inputs = CheckInputs(
        files, target_files, match.entry if match else None, engine, k, dict(params or {})
    )
    result = validate_method(family, inputs)
    if notes:
        result = CheckResult.of([*result.findings, *notes], result.required_env)
    return CheckRun(files, target_files, match, engine, k, result)


def files_family(files: DrafterFiles) -> Family | None:
    """The family the drafter's config says, else the one its tensors say (a config naming
    no family, with DFlash2's selector or DSpark's Markov head in its weights)."""
    said = detect_family(files.config)
    if said is None and files.weights is not None:
        return weights_family(files.weights.tensors)
    return said


def _own_family(family: Family | None) -> Callable[[RegistryEntry], bool]:
    """Which entries a drafter of ``family`` may be matched to (unknown family: any)."""
    if family is None:
        return lambda _entry: True
    return lambda entry: _fits(entry, family)


def _fits(entry: RegistryEntry, family: Family) -> bool:
    """An entry checks a drafter of its own family (DFlash2 drafters share DFlash entries)."""
    return entry.family == family or {entry.family, family} <= {"dflash", "dflash2"}


@dataclass(frozen=True)
class DiffRun:
    drafter: DrafterFiles
    against: str
    kind: Literal["registry", "file"]
    lines: list[DiffLine]


def diff_paths(drafter: str, against: str, registry_paths: Iterable[Path] = ()) -> DiffRun:
    """``drafter diff``: against a registry name, an entry file, or another config (file or
    directory)."""
    files = read_drafter(drafter)
    registry = load_registry(registry_paths)
    entry = registry.find(against)
    if entry is not None:
        return DiffRun(files, entry.name, "registry", _against_entry(files, entry))
    path = Path(against).expanduser()
    if path.is_dir():
        path = path / CONFIG_FILE
    other = read_json_object(path, "config")
    if "schema" in other and "keys" in other:
        entry = parse_entry(other, str(path))
        return DiffRun(files, str(path), "registry", _against_entry(files, entry))
    return DiffRun(files, str(path), "file", diff_configs(files.config, other))


def _against_entry(files: DrafterFiles, entry: RegistryEntry) -> list[DiffLine]:
    """The reference's keys, read where the engine reads them and named where the file has
    them (a speculators-layout drafter is read as the engine converts it)."""
    lines = diff_against_entry(files.checked_config, entry)
    if files.format == SPECULATORS:
        lines = [line for line in lines if not (line.key in ZLAB_ONLY and line.status == "missing")]
    return [replace(line, key=file_key(line.key, files.config)) for line in lines]
