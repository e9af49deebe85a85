"""YAML documents that remember where each key came from.

Inventory and playbook errors must name ``file:line:key`` in one line. PyYAML's safe loader drops
line numbers, so this module composes the node tree itself, keeps a map from key path to line, and
turns pydantic ``ValidationError``s into one :class:`~dflashops.errors.ConfigError` pointing at the
offending line. Duplicate keys, which PyYAML silently collapses, are errors here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dflashops.errors import ConfigError
from dflashops.pydantic_errors import Loc, dotted, first_error

ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True)
class YamlDoc:
    """Parsed YAML data plus the source line (1-based) of every key and list item."""

    data: Any
    source: str
    lines: Mapping[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int | None:
        """The line of ``loc`` or of its nearest ancestor that has one."""
        for end in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return None


def load_yaml_file(path: Path, error_cls: type[ConfigError] = ConfigError) -> YamlDoc:
    """Read and parse ``path``; unreadable files and broken YAML become ``error_cls``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error_cls("file not found", source=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error_cls(f"cannot read: {exc}", source=str(path)) from None
    return parse_yaml(text, str(path), error_cls)


def parse_yaml(text: str, source: str, error_cls: type[ConfigError] = ConfigError) -> YamlDoc:
    """Parse one YAML document, keeping line numbers; an empty document is an empty mapping."""
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:  # the reader rejects control characters up front
        raise error_cls(f"invalid YAML: {_reason(exc)}", source=source) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDoc({}, source, {})
        lines: dict[Loc, int] = {}
        _index_lines(node, (), lines, source, error_cls)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        reason = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        raise error_cls(f"invalid YAML: {reason}", source=source, line=line) from None
    except yaml.YAMLError as exc:
        raise error_cls(f"invalid YAML: {_reason(exc)}", source=source) from None
    finally:
        loader.dispose()
    return YamlDoc(data, source, lines)


def _reason(exc: Exception) -> str:
    return " ".join(str(exc).split())[:200]


def _scalar_key(node: yaml.Node) -> str | int:
    if isinstance(node, yaml.ScalarNode) and node.tag.endswith(":int"):
        try:
            return int(node.value)
        except ValueError:
            return str(node.value)
    return str(node.value) if isinstance(node, yaml.ScalarNode) else "?"


def _index_lines(
    node: yaml.Node,
    loc: Loc,
    lines: dict[Loc, int],
    source: str,
    error_cls: type[ConfigError],
) -> None:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: set[str | int] = set()
        for key_node, value_node in node.value:
            key = _scalar_key(key_node)
            if key == "<<":  # merge keys: children keep the anchor's lines
                _index_lines(value_node, loc, lines, source, error_cls)
                continue
            child = (*loc, key)
            if key in seen:
                raise error_cls(
                    "duplicate key",
                    source=source,
                    line=key_node.start_mark.line + 1,
                    key=dotted(child),
                )
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _index_lines(value_node, child, lines, source, error_cls)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*loc, index), lines, source, error_cls)


def validate_doc(
    model: type[ModelT],
    data: Any,
    doc: YamlDoc,
    error_cls: type[ConfigError] = ConfigError,
    *,
    base: Loc = (),
    context: dict[str, Any] | None = None,
) -> ModelT:
    """Validate ``data`` (found at ``base`` in ``doc``) as ``model``; errors name file:line:key."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        loc, reason = first_error(exc, data)
        full = (*base, *loc)
        raise error_cls(
            reason, source=doc.source, line=doc.line_of(full), key=dotted(full) or None
        ) from None
