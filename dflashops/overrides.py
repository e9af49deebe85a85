"""``--set key=value`` overrides: dotted keys, YAML-typed values, applied before validation.

Values are parsed as YAML scalars or flow collections (``6`` is an int, ``true`` a bool,
``[1,4]`` a list), so an override goes through the same pydantic model as the file it overrides.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from dflashops.errors import ConfigError


@dataclass(frozen=True)
class Override:
    """One ``--set`` item: where it goes and what it says."""

    path: tuple[str, ...]
    value: Any
    text: str

    @property
    def key(self) -> str:
        return ".".join(self.path)


def parse_overrides(
    items: Iterable[str], error_cls: type[ConfigError] = ConfigError
) -> list[Override]:
    """Parse ``key.sub=value`` strings; a malformed one raises ``error_cls`` naming it."""
    out = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        parts = tuple(key.split("."))
        if not sep or not key or any(not p.strip() for p in parts):
            raise error_cls("expected KEY=VALUE with a dotted key", source="--set", key=item)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw  # not YAML: keep the text, the model decides whether a string fits
        out.append(Override(parts, value, item))
    return out


def apply_overrides(data: dict[str, Any], overrides: Iterable[Override]) -> dict[str, Any]:
    """A deep copy of ``data`` with every override set (creating mappings on the way)."""
    result = copy.deepcopy(data)
    for ov in overrides:
        node = result
        for part in ov.path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = {}
                node[part] = child
            node = child
        node[ov.path[-1]] = ov.value
    return result


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``: mappings merge key by key, everything else is replaced."""
    result = copy.deepcopy(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result
