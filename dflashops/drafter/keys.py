"""Dotted keys over nested JSON objects, strict JSON equality, and short renderings of values.

Everything here is iterative or depth-capped: configs come from users and may nest deeply, and a
drafter check must end in findings or a one-line error, never in a ``RecursionError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeGuard

from dflashops.errors import DrafterError


class _Missing:
    """The marker for "no such key" (``None`` is a legal JSON value)."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False


MISSING: Final = _Missing()

SHOW_LIMIT = 120
_SHOW_ITEMS = 8
_SHOW_DEPTH = 3


def get_path(data: Any, path: str) -> Any:
    """The value at dotted ``path`` in nested mappings, or ``MISSING``."""
    node = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return MISSING
        node = node[part]
    return node


def first_present(data: Any, paths: Iterable[str]) -> tuple[str, Any] | None:
    """The first of ``paths`` that exists in ``data`` (engines read keys in a precedence order)."""
    for path in paths:
        value = get_path(data, path)
        if value is not MISSING:
            return path, value
    return None


def set_path(data: dict[str, Any], path: str, value: Any) -> None:
    """Set dotted ``path`` in ``data``, copying each dict on the way (so shared children stay
    untouched) and creating missing ones. A non-object in the way is a ``DrafterError``: replacing
    it would drop whatever it held."""
    parts = path.split(".")
    node = data
    for depth, part in enumerate(parts[:-1]):
        child = node.get(part, MISSING)
        if child is MISSING:
            child = {}
        elif isinstance(child, Mapping):
            child = dict(child)
        else:
            where = ".".join(parts[: depth + 1])
            raise DrafterError(
                f"cannot set {path}: {where} is {type_name(child)}, not an object",
                hint="fix that key by hand; dflashops never replaces values it does not know",
            )
        node[part] = child
        node = child
    node[parts[-1]] = value


def flatten(data: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``. Lists and empty objects are leaves."""
    out: dict[str, Any] = {}
    stack: list[tuple[str, Mapping[str, Any]]] = [("", data)]
    while stack:
        prefix, node = stack.pop()
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, Mapping) and value:
                stack.append((f"{dotted}.", value))
            else:
                out[dotted] = value
    return dict(sorted(out.items()))


def json_equal(left: Any, right: Any) -> bool:
    """Equality as an engine sees it: ``16`` is not ``16.0`` and ``True`` is not ``1``.

    The recursion is bounded by the shallower side, and registry values are shallow."""
    if type(left) is not type(right):
        return False
    if isinstance(left, list):
        return len(left) == len(right) and all(
            json_equal(a, b) for a, b in zip(left, right, strict=True)
        )
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(json_equal(left[k], right[k]) for k in left)
    return bool(left == right)


def is_int(value: Any) -> TypeGuard[int]:
    """A JSON integer (``bool`` is an ``int`` subclass in Python, not in JSON)."""
    return isinstance(value, int) and not isinstance(value, bool)


def type_name(value: Any) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def show(value: Any, limit: int = SHOW_LIMIT) -> str:
    """A compact, bounded JSON-like rendering (long lists elided, deep nesting cut)."""
    if value is MISSING:
        return "(missing)"
    text = _render(value, _SHOW_DEPTH)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _render(value: Any, depth: int) -> str:
    if isinstance(value, str):
        return json.dumps(value[:SHOW_LIMIT], ensure_ascii=False)
    if is_int(value) and value.bit_length() > 64:
        return f"<{value.bit_length()}-bit integer>"
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if depth <= 0:
        return "[…]" if isinstance(value, list) else "{…}"
    if isinstance(value, list):
        items = [_render(v, depth - 1) for v in value[:_SHOW_ITEMS]]
        if len(value) > _SHOW_ITEMS:
            items.append(f"… {len(value)} items")
        return "[" + ", ".join(items) + "]"
    if isinstance(value, Mapping):
        pairs = [
            f"{json.dumps(str(k), ensure_ascii=False)}: {_render(v, depth - 1)}"
            for k, v in list(value.items())[:_SHOW_ITEMS]
        ]
        if len(value) > _SHOW_ITEMS:
            pairs.append(f"… {len(value)} keys")
        return "{" + ", ".join(pairs) + "}"
    return repr(value)[:SHOW_LIMIT]
