"""The small readers every part of a registry entry uses, and the entry's optional fields
``expected_acceptance`` and ``trained_for`` (what ``doctor`` compares a live server with).

Kept apart from :mod:`dflashops.drafter.registry` so that module stays one screenful of schema;
standard library only, like the rest of the validation core.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dflashops.drafter.keys import is_int, type_name
from dflashops.errors import DrafterError

Basis = Literal["original", "agreed", "structural", "rule", "single", "derived"]
BASES: tuple[str, ...] = ("original", "agreed", "structural", "rule", "single", "derived")

_EXPECTED_FIELDS = {
    "workload",
    "k",
    "acceptance_length",
    "per_position",
    "temperature",
    "thinking",
    "engine",
    "basis",
    "sources",
    "note",
}
_TRAINED_FOR_FIELDS = {"thinking", "basis", "sources", "note"}


@dataclass(frozen=True)
class ExpectedAcceptance:
    """What the drafter reaches when it is served right, measured on a named workload.

    ``per_position`` is the unconditional acceptance at each draft position (vLLM's
    ``accepted at i / drafts``); ``acceptance_length`` is 1 + accepted / drafts at ``k``. At
    least one of the two is given. ``doctor`` compares a live server's position 0 with it."""

    workload: str
    k: int
    acceptance_length: float | None
    per_position: tuple[float, ...]
    basis: Basis
    sources: tuple[str, ...]
    temperature: float | None = None
    thinking: bool | None = None
    engine: str = ""
    note: str = ""

    @property
    def position0_floor(self) -> float | None:
        """The least position-0 acceptance this measurement implies: the rate itself, or (from
        a length alone) the mean rate (1 - AL) / k, since acceptance never rises with position."""
        if self.per_position:
            return self.per_position[0]
        if self.acceptance_length is None:
            return None
        return max(0.0, (self.acceptance_length - 1.0) / self.k)


@dataclass(frozen=True)
class TrainedFor:
    """The chat-template thinking mode the drafter was trained on (``enable_thinking``)."""

    thinking: bool
    basis: Basis
    sources: tuple[str, ...]
    note: str = ""


def only(data: Mapping[str, Any], allowed: set[str], source: str, where: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise DrafterError(f"{source}: {where}: unknown field {unknown[0]!r}")


def text(data: Mapping[str, Any], key: str, source: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise DrafterError(f"{source}: {key}: must be a non-empty string")
    return value


def strings(value: Any, source: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DrafterError(f"{source}: {where}: must be a list of strings, not {type_name(value)}")
    return tuple(value)


def known_sources(
    value: Any, sources: Mapping[str, str], source: str, where: str
) -> tuple[str, ...]:
    ids = strings(value, source, where)
    unknown = [i for i in ids if i not in sources]
    if unknown:
        raise DrafterError(f"{source}: {where}: unknown source {unknown[0]!r}")
    return ids


def expected_acceptance(
    value: Any, sources: Mapping[str, str], source: str
) -> tuple[ExpectedAcceptance, ...]:
    """``expected_acceptance``: a list of measurements, each checked."""
    if not isinstance(value, list):
        raise DrafterError(f"{source}: expected_acceptance: must be a list")
    return tuple(
        _expected(raw, sources, source, f"expected_acceptance[{i}]") for i, raw in enumerate(value)
    )


def _basis(raw: Mapping[str, Any], source: str, where: str) -> Basis:
    basis = raw.get("basis")
    if basis not in BASES:
        raise DrafterError(f"{source}: {where}.basis: must be one of {', '.join(BASES)}")
    return basis  # type: ignore[no-any-return]


def _backed(
    raw: Mapping[str, Any], sources: Mapping[str, str], source: str, where: str
) -> tuple[str, ...]:
    backing = known_sources(raw.get("sources", []), sources, source, f"{where}.sources")
    if not backing:
        raise DrafterError(f"{source}: {where}.sources: name at least one source")
    return backing


def _optional_bool(raw: Mapping[str, Any], key: str, source: str, where: str) -> bool | None:
    value = raw.get(key)
    if value is not None and not isinstance(value, bool):
        raise DrafterError(f"{source}: {where}.{key}: must be true, false or absent")
    return value


def _rate(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1


def _expected(raw: Any, sources: Mapping[str, str], source: str, where: str) -> ExpectedAcceptance:
    """One ``expected_acceptance`` item: a measurement with its workload, k and sources."""
    if not isinstance(raw, dict):
        raise DrafterError(f"{source}: {where}: must be an object")
    only(raw, _EXPECTED_FIELDS, source, where)
    k = raw.get("k")
    if not is_int(k) or not 1 <= k <= 64:
        raise DrafterError(f"{source}: {where}.k: must be an integer from 1 to 64")
    length = raw.get("acceptance_length")
    if length is not None and (
        not isinstance(length, int | float) or isinstance(length, bool) or not 1 <= length <= k + 1
    ):
        raise DrafterError(f"{source}: {where}.acceptance_length: must be within [1, k + 1]")
    rates = raw.get("per_position", [])
    if not isinstance(rates, list) or len(rates) > k or not all(_rate(r) for r in rates):
        raise DrafterError(f"{source}: {where}.per_position: at most k rates, each in [0, 1]")
    if length is None and not rates:
        raise DrafterError(f"{source}: {where}: give acceptance_length or per_position")
    temperature = raw.get("temperature")
    if temperature is not None and (
        not isinstance(temperature, int | float) or isinstance(temperature, bool) or temperature < 0
    ):
        raise DrafterError(f"{source}: {where}.temperature: must be a number >= 0")
    engine, note = raw.get("engine", ""), raw.get("note", "")
    if not isinstance(engine, str) or not isinstance(note, str):
        raise DrafterError(f"{source}: {where}: engine and note must be strings")
    return ExpectedAcceptance(
        workload=text(raw, "workload", f"{source}: {where}"),
        k=int(k),
        acceptance_length=None if length is None else float(length),
        per_position=tuple(float(r) for r in rates),
        basis=_basis(raw, source, where),
        sources=_backed(raw, sources, source, where),
        temperature=None if temperature is None else float(temperature),
        thinking=_optional_bool(raw, "thinking", source, where),
        engine=engine,
        note=note,
    )


def trained_for(raw: Any, sources: Mapping[str, str], source: str) -> TrainedFor | None:
    """``trained_for``: the thinking mode of the training data, with its sources."""
    if raw is None:
        return None
    where = "trained_for"
    if not isinstance(raw, dict):
        raise DrafterError(f"{source}: {where}: must be an object")
    only(raw, _TRAINED_FOR_FIELDS, source, where)
    thinking = raw.get("thinking")
    if not isinstance(thinking, bool):
        raise DrafterError(f"{source}: {where}.thinking: must be true or false")
    note = raw.get("note", "")
    if not isinstance(note, str):
        raise DrafterError(f"{source}: {where}.note: must be a string")
    return TrainedFor(
        thinking=thinking,
        basis=_basis(raw, source, where),
        sources=_backed(raw, sources, source, where),
        note=note,
    )
