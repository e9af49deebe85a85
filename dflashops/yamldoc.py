"""YAML documents that remember where each key came from.

Inventory and playbook errors must name ``file:line:key`` in one line. PyYAML's safe loader drops
line numbers, so this module composes the node tree itself, keeps a map from key path to line, and
turns pydantic ``ValidationError``s into one :class:`~dflashops.errors.ConfigError` pointing at the
offending line. Duplicate keys, which PyYAML silently collapses, are errors here.

Hostile documents are refused before they are built: a file over :data:`MAX_BYTES`, nesting
deeper than :data:`MAX_DEPTH` (PyYAML's composer recurses), aliases that expand past
:data:`MAX_NODES` nodes (a 1.6 KB "billion laughs" file would otherwise take seconds and GBs in
every later walk: line indexing, validation, error messages), integers past Python's digit limit
and non-finite numbers (``.inf``, ``1e999``), each as one line naming file:line(:key).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from dflashops.errors import ConfigError, read_capped, shorten
from dflashops.pydantic_errors import Loc, dotted, first_error

ModelT = TypeVar("ModelT", bound=BaseModel)

#: largest YAML document read (inventories and playbooks are a few KB)
MAX_BYTES = 4 * 1024 * 1024
#: deepest nesting of mappings and sequences, aliases expanded
MAX_DEPTH = 64
#: most nodes in a document once every alias is expanded
MAX_NODES = 100_000
#: longest number accepted (Python refuses int() past 4,300 digits)
MAX_DIGITS = 1000


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
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise error_cls(f"file is {size} bytes, more than {MAX_BYTES}", source=str(path))
        text = read_capped(path, MAX_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise error_cls("file not found", source=str(path)) from None
    except OSError as exc:
        raise error_cls(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    except UnicodeDecodeError as exc:
        raise error_cls(f"not UTF-8 text (byte {exc.start})", source=str(path)) from None
    return parse_yaml(text, str(path), error_cls)


def parse_yaml(text: str, source: str, error_cls: type[ConfigError] = ConfigError) -> YamlDoc:
    """Parse one YAML document, keeping line numbers; an empty document is an empty mapping."""
    if len(text) > MAX_BYTES:
        raise error_cls(f"document is {len(text)} characters, more than {MAX_BYTES}", source=source)
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:  # the reader rejects control characters up front
        raise error_cls(f"invalid YAML: {_reason(exc)}", source=source) from None
    try:
        check_yaml_limits(text, source, error_cls)
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
    except (RecursionError, ValueError) as exc:  # last guard: limits above should catch these
        raise error_cls(f"invalid YAML: {_reason(exc)}", source=source) from None
    finally:
        loader.dispose()
    return YamlDoc(data, source, lines)


def check_yaml_limits(text: str, source: str, error_cls: type[ConfigError] = ConfigError) -> None:
    """Refuse ``text`` if its nesting or alias expansion is past the limits, from the event stream.

    The parser is iterative, so this runs in time linear in the text: each anchor's expanded size
    and depth are recorded when its node closes, and each alias adds them again.
    """
    anchors: dict[str, tuple[int, int]] = {}  # anchor -> (expanded nodes, depth)
    frames: list[list[Any]] = []  # open collections: [anchor, nodes, depth below]
    total = 0

    def close(nodes: int, depth: int, anchor: str | None, line: int | None) -> None:
        nonlocal total
        if anchor:
            anchors[anchor] = (nodes, depth)
        if len(frames) + depth > MAX_DEPTH:
            raise error_cls(f"nesting deeper than {MAX_DEPTH} levels", source=source, line=line)
        if frames:
            frames[-1][1] += nodes
            frames[-1][2] = max(frames[-1][2], depth)

    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark else None
        if isinstance(event, yaml.AliasEvent):
            nodes, depth = anchors.get(event.anchor or "", (1, 1))
            total += nodes
            close(nodes, depth, None, line)
        elif isinstance(event, yaml.ScalarEvent):
            total += 1
            close(1, 1, event.anchor, line)
        elif isinstance(event, yaml.CollectionStartEvent):
            total += 1
            frames.append([event.anchor, 1, 0])
            if len(frames) > MAX_DEPTH:
                raise error_cls(f"nesting deeper than {MAX_DEPTH} levels", source=source, line=line)
        elif isinstance(event, yaml.CollectionEndEvent) and frames:
            anchor, nodes, depth = frames.pop()
            close(nodes, depth + 1, anchor, line)
        if total > MAX_NODES:
            raise error_cls(
                f"document expands to more than {MAX_NODES} nodes (aliases nested too deep)",
                source=source,
                line=line,
            )


def _check_scalar(
    node: yaml.ScalarNode, loc: Loc, source: str, error_cls: type[ConfigError]
) -> None:
    """Numbers Python or JSON cannot hold: too many digits, infinite or NaN."""
    tag = node.tag.rsplit(":", 1)[-1]
    if tag not in {"int", "float"}:
        return
    problem = None
    if len(node.value) > MAX_DIGITS:
        problem = f"number has more than {MAX_DIGITS} digits"
    elif tag == "float" and not math.isfinite(_FLOATS.construct_yaml_float(node)):
        problem = f"number must be finite (got {node.value})"
    if problem:
        line = node.start_mark.line + 1
        raise error_cls(problem, source=source, line=line, key=dotted(loc) or None)


_FLOATS = yaml.SafeLoader("")  # only its float constructor is used


def _reason(exc: Exception) -> str:
    return shorten(" ".join(str(exc).split()))


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
    if isinstance(node, yaml.ScalarNode):
        _check_scalar(node, loc, source, error_cls)
    elif isinstance(node, yaml.MappingNode):
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
