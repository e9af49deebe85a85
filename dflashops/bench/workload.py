"""Prompt sets: the built-in ones and custom JSONL files.

Built-ins are fixed text, so two runs send byte-identical requests:

- ``smoke``: the reference request alone ("Explain the theory of general relativity in
  detail.", temperature 0, max_tokens 2000 where the server allows), the number to compare
  across engines, methods and k.
- ``mixed``: the reference request plus a small varied set (code, arithmetic, summary, list,
  translation, dialogue, repetition-heavy text) whose acceptance differs by kind.

A JSONL workload has one request per line: ``{"prompt": "..."}`` (vLLM's custom-dataset field) or
``{"messages": [{"role": "user", "content": "..."}]}``, with optional ``id``, ``max_tokens`` and
``temperature``. Blank lines are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dflashops.errors import ConfigError, read_capped
from dflashops.pydantic_errors import dotted, first_error

REFERENCE_PROMPT = "Explain the theory of general relativity in detail."
DEFAULT_MAX_TOKENS = 2000


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class PromptSpec(BaseModel):
    """One request of a workload: a completion prompt or chat messages."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    prompt: str | None = None
    messages: tuple[ChatMessage, ...] | None = None
    max_tokens: int | None = Field(None, gt=0)
    temperature: float | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_input(self) -> PromptSpec:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of 'prompt' and 'messages'")
        if self.messages is not None and not self.messages:
            raise ValueError("'messages' is empty")
        return self

    def chat_messages(self) -> list[dict[str, str]]:
        if self.messages is not None:
            return [m.model_dump() for m in self.messages]
        return [{"role": "user", "content": self.prompt or ""}]

    def text(self) -> str:
        """All the text the server will tokenize (to budget ``max_tokens``)."""
        if self.prompt is not None:
            return self.prompt
        return "\n".join(m.content for m in self.messages or ())


class Workload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    prompts: tuple[PromptSpec, ...] = Field(min_length=1)
    max_tokens: int = Field(DEFAULT_MAX_TOKENS, gt=0)
    temperature: float = Field(0.0, ge=0)
    ignore_eos: bool = False
    source: str | None = None

    def requests(self, count: int) -> list[PromptSpec]:
        """``count`` requests, cycling through the prompts in order (deterministic)."""
        return [self.prompts[i % len(self.prompts)] for i in range(count)]


def _p(pid: str, prompt: str) -> PromptSpec:
    return PromptSpec(id=pid, prompt=prompt)


BUILTIN_WORKLOADS: dict[str, Workload] = {
    "smoke": Workload(name="smoke", prompts=(_p("relativity", REFERENCE_PROMPT),)),
    "mixed": Workload(
        name="mixed",
        prompts=(
            _p("relativity", REFERENCE_PROMPT),
            _p(
                "code",
                "Write a Python function that returns the n-th Fibonacci number iteratively, "
                "with a docstring and three doctest examples.",
            ),
            _p(
                "arithmetic",
                "A train leaves at 09:40 and travels 351 km at 78 km/h. At what time does it "
                "arrive? Show each step of the calculation.",
            ),
            _p(
                "summary",
                "Summarise in five sentences how a bill becomes a law in a parliamentary "
                "democracy.",
            ),
            _p("list", "List twenty common kitchen utensils, one per line, each with its use."),
            _p(
                "translation",
                "Translate into French and then into German: 'The library opens at nine, "
                "closes at six, and is closed on public holidays.'",
            ),
            PromptSpec(
                id="dialogue",
                messages=(
                    ChatMessage(role="system", content="You are a patient tutor."),
                    ChatMessage(role="user", content="Why is the sky blue? Explain simply."),
                ),
            ),
            _p(
                "repeat",
                "Repeat the following line ten times, numbering each copy: "
                "'The quick brown fox jumps over the lazy dog.'",
            ),
        ),
    ),
}


def load_workload(spec: str) -> Workload:
    """A built-in name (``smoke``, ``mixed``) or the path of a JSONL file."""
    if spec in BUILTIN_WORKLOADS:
        return BUILTIN_WORKLOADS[spec]
    path = Path(spec)
    try:
        is_file = path.is_file()
    except (OSError, ValueError):  # a name no file can have (too long): not a path
        is_file = False
    if not is_file:
        raise ConfigError(
            f"no built-in workload or file named {spec!r}",
            hint=f"built-ins: {', '.join(BUILTIN_WORKLOADS)}; or a .jsonl file",
        )
    return load_jsonl(path)


MAX_WORKLOAD_BYTES = 64 * 1024 * 1024  # prompts: thousands of them fit in a few MB


def load_jsonl(path: Path) -> Workload:
    prompts: list[PromptSpec] = []
    try:
        lines = read_capped(path, MAX_WORKLOAD_BYTES).decode("utf-8").split("\n")
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=str(path)) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=str(path)) from exc
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not JSON: {exc.msg}", source=str(path), line=number) from exc
        if not isinstance(data, dict):
            raise ConfigError("each line must be a JSON object", source=str(path), line=number)
        data.setdefault("id", f"{path.stem}-{len(prompts) + 1}")
        try:
            prompts.append(PromptSpec.model_validate(data))
        except ValidationError as exc:
            loc, reason = first_error(exc, data)
            raise ConfigError(
                reason, source=str(path), line=number, key=dotted(loc) or None
            ) from exc
    if not prompts:
        raise ConfigError("no requests in the file", source=str(path))
    return Workload(name=path.stem, prompts=tuple(prompts), source=str(path))
