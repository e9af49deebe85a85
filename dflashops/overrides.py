"""``--set key=value`` overrides: dotted keys, YAML-typed values, applied before validation.

Values are parsed as YAML scalars or flow collections (``6`` is an int, ``true`` a bool,
``[1,4]`` a list), so an override goes through the same pydantic model as the file it overrides.

A value is one short command-line string, so it may not use YAML anchors or aliases (an alias bomb
would expand in every later walk of the data, error messages included), nest deeper than
:data:`MAX_VALUE_DEPTH` or be longer than :data:`MAX_VALUE_CHARS`; non-finite numbers and integers
past :data:`MAX_DIGITS` digits are refused too, each as one line naming the key.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from dflashops.errors import ConfigError

#: deepest nesting of flow collections in one value
MAX_VALUE_DEPTH = 32
#: longest value text
MAX_VALUE_CHARS = 65_536
#: longest number (Python refuses int() past 4,300 digits)
MAX_DIGITS = 1000


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
        if len(raw) > MAX_VALUE_CHARS:
            raise error_cls(
                f"value longer than {MAX_VALUE_CHARS} characters", source="--set", key=key
            )
        try:
            problem = _hostile_value(raw)
            if problem:
                raise error_cls(problem, source="--set", key=key)
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw  # not YAML: keep the text, the model decides whether a string fits
        out.append(Override(parts, value, item))
    return out


def _hostile_value(raw: str) -> str | None:
    """Why ``raw`` may not be loaded, read from the parser's events before anything is built."""
    depth = 0
    for event in yaml.parse(raw, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
            return "YAML anchors and aliases are not allowed in --set values"
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_VALUE_DEPTH:
                return f"value nests deeper than {MAX_VALUE_DEPTH} levels"
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        elif isinstance(event, yaml.ScalarEvent) and event.style is None:
            problem = _bad_number(event.value)
            if problem:
                return problem
    return None


def _bad_number(text: str) -> str | None:
    """A plain scalar YAML reads as a number Python or JSON cannot hold, or None."""
    resolved: str = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    tag = resolved.rsplit(":", 1)[-1]
    if tag not in {"int", "float"}:
        return None
    if len(text) > MAX_DIGITS:
        return f"number has more than {MAX_DIGITS} digits"
    if tag == "float" and not math.isfinite(_RESOLVER.construct_yaml_float(_node(text))):
        return f"number must be finite (got {text})"
    return None


_RESOLVER = yaml.SafeLoader("")  # its implicit resolver and float constructor, nothing else


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


def _node(text: str) -> yaml.ScalarNode:
    return yaml.ScalarNode("tag:yaml.org,2002:float", text)
