"""The mutations of the hostile corpus (``hostile_corpus``): values an operator's typo, a broken
editor or an attacker could put where a number, a string or a mapping belongs, and text-level
damage to a whole file. Every function is deterministic given its ``random.Random``.

Values are replaced in place, by the YAML or JSON node's own span in the text, so comments,
layout and every other line stay as they were and an error can name the line it should.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass

import yaml

# ---------------------------------------------------------------- values


def flow_bomb(levels: int = 9, width: int = 9) -> str:
    """A "billion laughs" as one flow value: ``width ** levels`` strings from ~1 KB."""
    value = '&a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
    for i in range(1, levels):
        value = f"&a{i} [" + ", ".join([value] + [f"*a{i - 1}"] * (width - 1)) + "]"
    return value


#: (label, YAML flow text): each fits on one line, so it can replace any value in place
YAML_VALUES: list[tuple[str, str]] = [
    ("empty-list", "[]"),
    ("empty-map", "{}"),
    ("list", "[1, two, 3.0]"),
    ("map", "{a: 1, b: [2]}"),
    ("string", "'just text'"),
    ("empty-string", "''"),
    ("true", "true"),
    ("null", "null"),
    ("tilde", "~"),
    ("zero", "0"),
    ("negative", "-1"),
    ("fraction", "3.5"),
    ("string-zero", "'0'"),
    ("huge-negative", "-9223372036854775809"),
    ("int64-max", "9223372036854775807"),
    ("digits-5000", "9" * 5000),
    ("digits-1001", "1" * 1001),
    ("exp-overflow", "1e999"),
    ("exp-underflow", "1e-400"),
    ("inf", ".inf"),
    ("neg-inf", "-.inf"),
    ("nan", ".nan"),
    ("hex", "0x7fffffffffffffff"),
    ("octal", "0o777"),
    ("underscored", "1_000"),
    ("binary", "!!binary aGVsbG8="),
    ("date", "2001-01-01"),
    ("timestamp", "2001-12-14t21:59:43.10-05:00"),
    ("set", "!!set {a, b}"),
    ("omap", "!!omap [{a: 1}]"),
    ("python-tag", "!!python/object/apply:os.system ['true']"),
    ("unknown-tag", "!custom x"),
    ("undefined-alias", "*nowhere"),
    ("recursive-alias", "&loop [*loop]"),
    ("merge-undefined", "{<<: *nowhere}"),
    ("merge-scalar", "{<<: 1}"),
    ("alias-bomb", flow_bomb()),
    ("deep-list", "[" * 3000 + "]" * 3000),
    ("deep-map", "{a: " * 1500 + "1" + "}" * 1500),
    ("long-string", '"' + "x" * 100_000 + '"'),
    ("long-plain", "y" * 20_000),
    ("nul", '"a\\0b"'),
    ("controls", '"\\x01\\x1b[31m\\x7f\\u202e"'),
    ("newlines", '"a\\nb\\rc"'),
    ("shell", '"$(touch /tmp/dflashops-pwn); `id`; \' ; rm -rf /"'),
    ("traversal", "../../../../etc/passwd"),
    ("tilde-user", "~nouser/x"),
    ("format", "'%s%n{0}{env}'"),
    ("unicode", "'ÿ\U0001f600\u200b'"),
    ("comma-equals", "'a,b=c'"),
    ("env-ref", "{env: 'NOT A NAME'}"),
    ("file-ref", "{file: /nonexistent/dflashops/x}"),
]

#: (label, JSON text) for JSON files; ``1e999`` and ``Infinity`` load as inf, ``NaN`` as nan
JSON_VALUES: list[tuple[str, str]] = [
    ("empty-list", "[]"),
    ("empty-map", "{}"),
    ("list", '[1, "two", 3.0]'),
    ("map", '{"a": 1}'),
    ("string", '"just text"'),
    ("empty-string", '""'),
    ("true", "true"),
    ("null", "null"),
    ("zero", "0"),
    ("negative", "-1"),
    ("fraction", "3.5"),
    ("huge-negative", "-9223372036854775809"),
    ("digits-5000", "9" * 5000),
    ("digits-400", "9" * 400),
    ("exp-overflow", "1e999"),
    ("infinity", "Infinity"),
    ("neg-infinity", "-Infinity"),
    ("nan", "NaN"),
    ("deep-list", "[" * 100_000 + "]" * 100_000),
    ("deep-map", '{"a": ' * 3000 + "1" + "}" * 3000),
    ("long-string", '"' + "x" * 200_000 + '"'),
    ("nul", '"a\\u0000b"'),
    ("controls", '"\\u0001\\u001b[31m\\u007f\\u202e"'),
    ("lone-surrogate", '"\\ud800"'),
    ("big-list", "[" + ", ".join(["1"] * 50_000) + "]"),
]

#: single bytes or short byte strings inserted into a file at a random place
DAMAGE_BYTES: list[bytes] = [
    b"\x00",
    b"\x01",
    b"\x1b[31m",
    b"\x7f",
    b"\xff",
    b"\xfe\xff",
    b"\xc3",  # a truncated UTF-8 sequence
    b"\t",
    b"\r",
    b":",
    b": :",
    b"-",
    b"[",
    b"{",
    b"}",
    b'"',
    b"'",
    b"&",
    b"*",
    b"!",
    b"%",
    b"@",
    b"`",
    b"|",
    b">",
    b"#",
    b"\n  ",
    b"\xe2\x80\xae",  # RIGHT-TO-LEFT OVERRIDE
]


# ---------------------------------------------------------------- YAML nodes


@dataclass(frozen=True)
class Span:
    """A value node of a document: its dotted key path and where its text lies."""

    path: str
    start: int
    end: int
    line: int  # 1-based line of the node's start
    column: int
    block_mapping: bool  # a block-style mapping: a key can be inserted on its first key's line


def yaml_spans(text: str) -> list[Span]:
    """Every value node of a YAML document, with its text span, in document order."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    spans: list[Span] = []
    if root is not None:
        spans.extend(_walk(root, "", set()))
    return spans


def _walk(node: yaml.Node, path: str, seen: set[int]) -> Iterator[Span]:
    # an alias is the node it names: each node is walked once (an alias bomb or a recursive
    # alias left by an earlier mutation would otherwise expand here)
    if id(node) in seen:
        return
    seen.add(id(node))
    if path:
        yield Span(
            path,
            node.start_mark.index,
            node.end_mark.index,
            node.start_mark.line + 1,
            node.start_mark.column,
            isinstance(node, yaml.MappingNode) and not node.flow_style and bool(node.value),
        )
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            yield from _walk(value, f"{path}.{name}" if path else str(name), seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            yield from _walk(item, f"{path}[{index}]", seen)


def replace_span(text: str, span: Span, snippet: str) -> str:
    return text[: span.start] + snippet + text[span.end :]


def insert_key(text: str, span: Span, line: str) -> str:
    """``line`` (``key: value``) added as the first key of the block mapping ``span``."""
    head = text[: span.start]
    return head + line + "\n" + " " * span.column + text[span.start :]


# ---------------------------------------------------------------- JSON paths


JsonPath = tuple[str | int, ...]


def json_paths(data: object, path: JsonPath = ()) -> Iterator[JsonPath]:
    """The path (keys and indexes) of every value in a JSON document."""
    if path:
        yield path
    if isinstance(data, dict):
        for key, value in data.items():
            yield from json_paths(value, (*path, key))
    elif isinstance(data, list):
        for index, value in enumerate(data[:8]):  # long lists: their first items are enough
            yield from json_paths(value, (*path, index))


def dotted(path: JsonPath) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


_MARK = "\ufdd0HOSTILE\ufdd0"


def json_with(data: object, path: JsonPath, raw: str | None) -> str:
    """``data`` dumped with the value at ``path`` replaced by the raw JSON text ``raw`` (or
    removed when ``raw`` is None)."""
    copy = json.loads(json.dumps(data))
    parent = copy
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if raw is None:
        del parent[last]
        return json.dumps(copy, indent=2)
    parent[last] = _MARK
    return json.dumps(copy, indent=2).replace(json.dumps(_MARK), raw, 1)


# ---------------------------------------------------------------- text damage


def damage(rng: random.Random, content: bytes) -> tuple[str, bytes]:
    """One text-level mutation of a file: (label, new content)."""
    lines = content.split(b"\n")
    kind = rng.choice(
        [
            "truncate",
            "insert",
            "insert",
            "delete-line",
            "duplicate-line",
            "swap-lines",
            "indent",
            "dedent",
            "bom",
            "utf16",
            "crlf",
            "cr-only",
            "second-document",
            "directive",
            "empty",
            "whitespace",
            "top-list",
            "top-scalar",
            "tabs",
        ]
    )
    at = rng.randrange(len(content) + 1)
    line = rng.randrange(len(lines))
    if kind == "truncate":
        return f"truncate@{at}", content[:at]
    if kind == "insert":
        inserted = rng.choice(DAMAGE_BYTES)
        return f"insert {inserted!r}@{at}", content[:at] + inserted + content[at:]
    if kind == "delete-line":
        return f"delete-line {line + 1}", b"\n".join(lines[:line] + lines[line + 1 :])
    if kind == "duplicate-line":
        return f"duplicate-line {line + 1}", b"\n".join(
            [*lines[: line + 1], lines[line], *lines[line + 1 :]]
        )
    if kind == "swap-lines":
        other = rng.randrange(len(lines))
        swapped = list(lines)
        swapped[line], swapped[other] = swapped[other], swapped[line]
        return f"swap-lines {line + 1},{other + 1}", b"\n".join(swapped)
    if kind in ("indent", "dedent"):
        changed = list(lines)
        changed[line] = b" " + changed[line] if kind == "indent" else changed[line][1:]
        return f"{kind} line {line + 1}", b"\n".join(changed)
    if kind == "bom":
        return "bom", b"\xef\xbb\xbf" + content
    if kind == "utf16":
        return "utf16", content.decode("utf-8", "replace").encode("utf-16")
    if kind == "crlf":
        return "crlf", content.replace(b"\n", b"\r\n")
    if kind == "cr-only":
        return "cr-only", content.replace(b"\n", b"\r")
    if kind == "second-document":
        return "second-document", content + b"\n---\nsecond: document\n"
    if kind == "directive":
        return "directive", b"%YAML 1.1\n%TAG ! tag:evil.example,2000:\n---\n" + content
    if kind == "empty":
        return "empty", b""
    if kind == "whitespace":
        return "whitespace", b"   \n\t\n"
    if kind == "top-list":
        return "top-list", b"- a\n- b\n"
    if kind == "top-scalar":
        return "top-scalar", b"just a string\n"
    changed = list(lines)
    changed[line] = changed[line].replace(b"  ", b"\t", 1)
    return f"tab line {line + 1}", b"\n".join(changed)


def binary_secret(secret: str) -> str:
    """A YAML ``!!binary`` value holding ``secret``."""
    return "!!binary " + base64.b64encode(secret.encode()).decode()
