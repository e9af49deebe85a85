"""The prompts a drafter is trained on: one JSON object per line, in any of three shapes.

- ``{"prompt": "…"}``: one user turn;
- ``{"messages": [{"role": "…", "content": "…"}, …]}``: an OpenAI chat;
- ``{"conversations": [{"role" | "from": "…", "content" | "value": "…"}, …]}``: the
  conversation layout of the ``speculators`` library (ShareGPT's ``from``/``value`` too).

Assistant turns in the file are placeholders: the data stage regenerates every one of them with
the target. Each sample keeps the file's ``id`` (else ``<file stem>-<line>``), so a rerun knows
what it already has. A line that is none of these is a :class:`ConfigError` naming ``file:line``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from dflashops.errors import ConfigError

Role = Literal["system", "user", "assistant"]
MAX_LINE_BYTES = 16 * 2**20
# ShareGPT's speaker names, as the speculators library maps them
_ROLE_ALIASES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
}


@dataclass(frozen=True)
class Turn:
    role: Role
    content: str


@dataclass(frozen=True)
class Sample:
    """One conversation to regenerate: its id and its turns (assistant turns are replaced)."""

    id: str
    turns: tuple[Turn, ...]

    @property
    def replies(self) -> int:
        """How many assistant turns the target writes: one per assistant turn in the file, or
        one after the last turn when the file ends on the user."""
        count = sum(t.role == "assistant" for t in self.turns)
        return count + (self.turns[-1].role != "assistant")


def read_samples(path: Path) -> list[Sample]:
    """Every sample in ``path``; duplicate ids are an error (a rerun could not tell them apart)."""
    samples: list[Sample] = []
    seen: dict[str, int] = {}
    for number, line in _lines(path):
        sample = parse_line(line, path=path, number=number)
        if sample.id in seen:
            raise ConfigError(
                f"id {sample.id!r} is also on line {seen[sample.id]}",
                source=str(path),
                line=number,
                key="id",
            )
        seen[sample.id] = number
        samples.append(sample)
    if not samples:
        raise ConfigError("no samples in the file", source=str(path))
    return samples


def parse_line(line: str, *, path: Path, number: int) -> Sample:
    """One sample from one JSONL line."""

    def bad(reason: str, key: str | None = None) -> ConfigError:
        return ConfigError(reason, source=str(path), line=number, key=key)

    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise bad(f"not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise bad("each line must be a JSON object")
    given = [key for key in ("prompt", "messages", "conversations") if key in data]
    if len(given) != 1:
        raise bad("give exactly one of prompt, messages or conversations")
    key = given[0]
    if key == "prompt":
        if not isinstance(data["prompt"], str) or not data["prompt"].strip():
            raise bad("must be a non-empty string", key)
        turns: tuple[Turn, ...] = (Turn("user", data["prompt"]),)
    else:
        turns = _turns(data[key], key, bad)
    raw_id = data.get("id", f"{path.stem}-{number}")
    if not isinstance(raw_id, str | int) or isinstance(raw_id, bool) or str(raw_id) == "":
        raise bad("must be a non-empty string or an integer", "id")
    return Sample(id=str(raw_id), turns=turns)


def _turns(raw: Any, key: str, bad: Any) -> tuple[Turn, ...]:
    if not isinstance(raw, list) or not raw:
        raise bad("must be a non-empty list of turns", key)
    turns: list[Turn] = []
    for index, item in enumerate(raw):
        where = f"{key}[{index}]"
        if not isinstance(item, dict):
            raise bad("each turn must be an object", where)
        speaker = item.get("role", item.get("from"))
        role = _ROLE_ALIASES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise bad(f"role must be one of {', '.join(_ROLE_ALIASES)}", f"{where}.role")
        content = item.get("content", item.get("value"))
        if role != "assistant" and not isinstance(content, str):
            raise bad("content must be a string", f"{where}.content")
        turns.append(Turn(role, content if isinstance(content, str) else ""))
    if all(t.role == "assistant" for t in turns):
        raise bad("no user turn to answer", key)
    if turns[0].role == "assistant":
        raise bad("a conversation starts with a system or user turn", f"{key}[0].role")
    return tuple(turns)


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines with their numbers; an unreadable file or an oversized line is an
    error, not a hang on a file that is not a dataset."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    with handle:
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(raw) > MAX_LINE_BYTES:
                raise ConfigError(
                    f"line longer than {MAX_LINE_BYTES} bytes", source=str(path), line=number
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ConfigError("not UTF-8", source=str(path), line=number) from None
            if text.strip():
                yield number, text
