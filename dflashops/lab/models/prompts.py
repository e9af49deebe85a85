"""Prompts shipped with the lab models (``prompts.jsonl``), cut from the corpus with a fixed seed.

Kinds:
- ``decay``: plain completion prompts; the decaying draft is calibrated on exactly these, so a
  server test that sends them greedily sees about the acceptance recorded in ``acceptance.json``.
- ``ngram``: a snippet repeated several times, so prompt-lookup (n-gram) drafting finds matches.
- ``chat``: short chat messages for chat-completion smoke tests.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from typing import Any

from dflashops.lab.models.layout import read_corpus

KIND_DECAY = "decay"
KIND_NGRAM = "ngram"
KIND_CHAT = "chat"

DECAY_PROMPTS = 16
NGRAM_PROMPTS = 8
NGRAM_REPEATS = 4
MAX_TOKENS = 32


def _snippet(text: str, rng: random.Random, length: int) -> str:
    """About ``length`` characters of ``text`` starting and ending at a word boundary."""
    start = rng.randrange(0, len(text) - 2 * length)
    start = text.index(" ", start) + 1
    end = text.index(" ", start + length)
    return " ".join(text[start:end].split())


def _code_line(code: str, rng: random.Random) -> str:
    lines = [line.strip() for line in code.splitlines() if 24 <= len(line.strip()) <= 72]
    return rng.choice(lines)


def build_prompts(seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    code, prose = read_corpus()  # corpus files sort as code.txt, prose.txt
    records: list[dict[str, Any]] = []
    for i in range(DECAY_PROMPTS):
        text = prose if i % 2 else code
        records.append(
            {"kind": KIND_DECAY, "prompt": _snippet(text, rng, 100), "max_tokens": MAX_TOKENS}
        )
    for i in range(NGRAM_PROMPTS):
        unit = _code_line(code, rng) if i % 2 == 0 else _snippet(prose, rng, 48)
        records.append(
            {
                "kind": KIND_NGRAM,
                "prompt": " ".join([unit] * NGRAM_REPEATS),
                "max_tokens": 64,
            }
        )
    for _ in range(4):
        records.append(
            {
                "kind": KIND_CHAT,
                "messages": [{"role": "user", "content": _snippet(prose, rng, 60)}],
                "max_tokens": MAX_TOKENS,
            }
        )
    return [{"id": f"{r['kind']}-{i}", **r} for i, r in enumerate(records)]


def dump_jsonl(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)
