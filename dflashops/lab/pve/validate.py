"""Parameter validation driven by the PVE schema, with PVE's rules and messages.

Follows ``PVE::JSONSchema::check_prop`` / ``check_object`` / ``parse_property_string``: a request
parameter is a string; its schema gives the type (``boolean`` is only ``1``/``0``), ``format``
(a named format or a dict describing a property string such as ``net[n]``), ``pattern`` (anchored,
Perl syntax), ``maxLength``/``minLength``, ``minimum``/``maximum``, ``enum`` and ``requires``.
Unknown parameters are refused unless the schema allows additional properties. Indexed schema
keys (``net[n]``, ``mp[n]``, ``dev[n]``, ``unused[n]``) accept ``<name><i>`` for the index range
the real server registers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from dflashops.lab.pve.errors import param_error
from dflashops.lab.pve.formats import FormatError, check_named_format, format_size

Schema = Mapping[str, Any]

# How many instances of each indexed key PVE registers (pve-container: $MAX_LXC_NETWORKS = 32,
# $MAX_MOUNT_POINTS = $MAX_UNUSED_DISKS = 256, $MAX_DEVICES = 256).
INDEX_LIMITS = {"net": 32, "mp": 256, "unused": 256, "dev": 256}
DEFAULT_INDEX_LIMIT = 256

_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_NUMBER = re.compile(r"[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?", re.ASCII)
MISSING = "property is missing and it is not optional"
NOT_IN_SCHEMA = (
    "property is not defined in schema and the schema does not allow additional properties"
)


def is_number(value: str) -> bool:
    return bool(_NUMBER.fullmatch(value))


@lru_cache(maxsize=512)
def perl_regex(pattern: str) -> re.Pattern[str]:
    """Compile a schema pattern written in Perl syntax (``(?^:...)`` groups) for Python."""
    python = re.sub(
        r"\(\?\^([a-z]*):", lambda m: f"(?{m.group(1)}:" if m.group(1) else "(?:", pattern
    )
    return re.compile(python, re.ASCII)


def parse_boolean(text: str) -> int | None:
    """``PVE::JSONSchema::parse_boolean`` (used inside property strings and config files)."""
    lowered = text.lower()
    if lowered in ("1", "on", "yes", "true"):
        return 1
    if lowered in ("0", "off", "no", "false"):
        return 0
    return None


def _number_text(limit: Any) -> str:
    value = float(limit)
    return str(int(value)) if value.is_integer() else str(value)


def check_type(path: str, kind: str | None, value: str, errors: dict[str, str]) -> bool:
    ok = {
        "boolean": value in ("0", "1"),
        "integer": bool(_INTEGER.fullmatch(value)),
        "number": is_number(value),
    }.get(kind or "string", True)
    if not ok:
        errors[path] = f"type check ('{kind}') failed - got '{value}'"
    return ok


def check_format(fmt: Any, value: str, path: str) -> dict[str, str] | None:
    """Check a value against a named or dict format; return the parsed property string if any."""
    if isinstance(fmt, Mapping):
        return parse_property_string(fmt, value, path)
    if fmt != "regex":
        check_named_format(str(fmt), value)
    return None


def check_prop(value: str, schema: Schema, path: str, errors: dict[str, str]) -> bool:
    """Check one scalar value; record PVE's message under ``path`` and return False on failure."""
    if not check_type(path, schema.get("type"), value, errors):
        return False
    fmt = schema.get("format")
    if fmt:
        try:
            check_format(fmt, value, path)
        except FormatError as exc:
            errors[path] = f"invalid format - {exc}"
            return False
    message = _constraint_violation(value, schema)
    if message:
        errors[path] = message
        return False
    return True


def _constraint_violation(value: str, schema: Schema) -> str | None:
    pattern = schema.get("pattern")
    if isinstance(pattern, str) and not perl_regex(pattern).fullmatch(value):
        return "value does not match the regex pattern"
    if schema.get("maxLength") is not None and len(value) > int(schema["maxLength"]):
        return f"value may only be {schema['maxLength']} characters long"
    if schema.get("minLength") is not None and len(value) < int(schema["minLength"]):
        return f"value must be at least {schema['minLength']} characters long"
    if is_number(value):
        if schema.get("maximum") is not None and float(value) > float(schema["maximum"]):
            return f"value must have a maximum value of {_number_text(schema['maximum'])}"
        if schema.get("minimum") is not None and float(value) < float(schema["minimum"]):
            return f"value must have a minimum value of {_number_text(schema['minimum'])}"
    enum = schema.get("enum")
    if enum is not None and value not in [str(item) for item in enum]:
        return f"value '{value}' does not have a value in the enumeration '{', '.join(enum)}'"
    return None


def parse_property_string(fmt: Schema, text: str, path: str = "") -> dict[str, str]:
    """``PVE::JSONSchema::parse_property_string``: ``key=value,...`` checked against ``fmt``."""
    result: dict[str, str] = {}
    default_key = next((key for key, sub in fmt.items() if sub.get("default_key")), None)
    default_used = False
    for part in text.split(","):
        if not part.strip():
            continue
        match = re.fullmatch(r"([^=]+)=(.+)", part, re.DOTALL)
        if match:
            key, value = match.group(1), match.group(2)
            if key in result:
                raise FormatError(f"duplicate key in comma-separated list property: {key}")
            sub = fmt.get(key)
            if sub is None:
                raise FormatError(f"invalid key in comma-separated list property: {key}")
            if sub.get("type") == "boolean":
                parsed = parse_boolean(value)
                value = value if parsed is None else str(parsed)
            result[key] = value
        elif "=" not in part:
            if default_key is None:
                raise FormatError("value without key, but schema does not define a default key")
            if default_used or default_key in result:
                raise FormatError(f"duplicate key in comma-separated list property: {default_key}")
            result[default_key] = part
            default_used = True
        else:
            raise FormatError("missing key in comma-separated list property")
    errors: dict[str, str] = {}
    check_object(path, fmt, result, False, errors)
    if errors:
        raise FormatError("format error", errors)
    return result


def print_property_string(data: Mapping[str, Any], fmt: Schema, skip: tuple[str, ...] = ()) -> str:
    """``PVE::JSONSchema::print_property_string``: default key, required keys, then the rest."""
    default_key = next((key for key, sub in fmt.items() if sub.get("default_key")), None)
    required = sorted(key for key in data if key in fmt and not fmt[key].get("optional"))
    first = [default_key] if default_key is not None and default_key in data else []
    order = list(dict.fromkeys([*first, *required, *sorted(data)]))
    parts = []
    for key in order:
        value = data[key]
        if key in skip or value is None:
            continue
        if fmt.get(key, {}).get("format") == "disk-size" and isinstance(value, int):
            value = format_size(value)
        parts.append(str(value) if key == default_key else f"{key}={value}")
    return ",".join(parts)


def check_object(
    path: str, props: Schema, values: Mapping[str, str], additional: bool, errors: dict[str, str]
) -> None:
    """``PVE::JSONSchema::check_object`` for a flat object of string values."""
    for key, sub in props.items():
        sub_path = f"{path}.{key}" if path else key
        if key in values:
            check_prop(values[key], sub, sub_path, errors)
        elif not sub.get("optional") and not sub.get("alias"):
            errors[sub_path] = MISSING
    for key in values:
        sub_path = f"{path}.{key}" if path else key
        sub = props.get(key)
        if sub is None:
            if not additional:
                errors[sub_path] = NOT_IN_SCHEMA
            continue
        requires = sub.get("requires")
        if isinstance(requires, str) and requires not in values:
            req_path = f"{path}.{requires}" if path else requires
            errors[req_path] = f"missing property - '{sub_path}' requires this property"


def expand_indexed(props: Schema, name: str) -> Schema | None:
    """The schema of ``name`` when ``props`` holds it as an indexed key such as ``net[n]``."""
    match = re.fullmatch(r"([a-z_]+?)(\d+)", name)
    if not match:
        return None
    base, index = match.group(1), match.group(2)
    schema = props.get(f"{base}[n]")
    if schema is None or (len(index) > 1 and index.startswith("0")):
        return None
    return schema if int(index) < INDEX_LIMITS.get(base, DEFAULT_INDEX_LIMIT) else None


def property_schema(props: Schema, name: str) -> Schema | None:
    return props.get(name) if "[n]" not in name and name in props else expand_indexed(props, name)


def validate_params(parameters: Schema, values: Mapping[str, str]) -> dict[str, Any]:
    """Validate request parameters against a method's ``parameters`` schema; typed result.

    Raises the 400 ``Parameter verification failed.`` error with per-parameter messages.
    """
    props: Schema = parameters.get("properties") or {}
    additional = bool(parameters.get("additionalProperties", 1))
    flat = {name: props[name] for name in props if not name.endswith("[n]")}
    for name in values:
        if name not in flat:
            schema = expand_indexed(props, name)
            if schema is not None:
                flat[name] = schema
    errors: dict[str, str] = {}
    check_object("", flat, values, additional, errors)
    if errors:
        raise param_error(errors)
    return {name: typed_value(flat.get(name), value) for name, value in values.items()}


def typed_value(schema: Schema | None, value: str) -> Any:
    """Convert a checked string to the JSON type its schema names (as PVE returns it)."""
    kind = (schema or {}).get("type")
    if kind in ("integer", "boolean"):
        return int(value)
    if kind == "number":
        number = float(value)
        return int(number) if number.is_integer() else number
    return value
