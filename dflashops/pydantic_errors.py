"""One readable line from a pydantic ``ValidationError``: every user-facing loader (inventory,
playbook, workloads, saved reports, the deployment manifest, tune inputs) reports the first
error the same way, as a real key path and a reason without pydantic's internal names."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

Loc = tuple[str | int, ...]


def first_error(exc: ValidationError, data: Any = None) -> tuple[Loc, str]:
    """The first pydantic error as (location in ``data``, readable reason).

    pydantic puts union member names ("TokenAuth", "function-after[...]") into locations; parts
    that are not keys of the data on the way down are dropped, so the location is a real key path.
    """
    err = exc.errors(include_url=False)[0]
    loc = _data_path(tuple(err["loc"]), data)
    msg = str(err["msg"])
    if err["type"] == "extra_forbidden":
        msg = "unknown key"
    elif err["type"] == "missing":
        msg = "required key is missing"
    elif (
        "input" in err
        and err["type"] not in {"value_error", "assertion_error"}
        and not names_secret(loc)
    ):
        msg = f"{msg} (got {_short_repr(err['input'])})"
    msg = msg.removeprefix("Value error, ")
    return loc, msg


# Words in a key that say its value may be a secret (auth.password, server.env.HF_TOKEN, an
# --api-key in extra_args): a value there is never echoed, whatever is wrong with it.
SECRET_KEY_WORDS = frozenset(
    {
        "auth",
        "key",
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "env",
        "extra_args",
        "engine_args",
    }
)


def names_secret(loc: Loc) -> bool:
    """Whether any key of ``loc`` names a secret (or holds values that may be one)."""
    for part in loc:
        if not isinstance(part, str):
            continue
        if part.lower() in SECRET_KEY_WORDS:
            return True
        if any(word in SECRET_KEY_WORDS for word in re.split(r"[^a-z0-9]+", part.lower())):
            return True
    return False


def _data_path(loc: Loc, data: Any) -> Loc:
    out: list[str | int] = []
    node = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(node, dict):
            if part in node:
                out.append(part)
                node = node[part]
            elif last:
                out.append(part)  # an unknown or missing key: name it
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif node is None and last and not _is_model_tag(part):
            out.append(part)
    return tuple(out)


def _is_model_tag(part: str | int) -> bool:
    return isinstance(part, str) and ("[" in part or part[:1].isupper())


# repr of a hostile input (a huge nested structure) must not itself take long or much memory
_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother = 2, 50, 50
_REPR.maxlist = _REPR.maxdict = _REPR.maxtuple = _REPR.maxset = 4


def _short_repr(value: Any) -> str:
    text = _REPR.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def dotted(loc: Sequence[str | int]) -> str:
    """``("containers", "ct1", "gpus", 0)`` → ``containers.ct1.gpus[0]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def first_error_line(exc: ValidationError, data: Any = None, *, root: str = "") -> str:
    """``where: reason`` of the first error (``root`` names a document-level error), with how
    many more there are."""
    loc, reason = first_error(exc, data)
    where = dotted(loc) or root
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {reason}{more}" if where else f"{reason}{more}"
