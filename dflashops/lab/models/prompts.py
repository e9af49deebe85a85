"""Prompts shipped with the lab models (``prompts.jsonl``), cut from the corpus with a fixed seed.

Kinds:
- ``decay``: plain completion prompts; the decaying draft is calibrated on exactly these, so a
  server test that sends them greedily sees about the acceptance recorded in ``acceptance.json``.
- ``ngram``: a snippet repeated several times, so prompt-lookup (n-gram) drafting finds a match
  right after the prompt. The trained target does not go on repeating it (it resumes the corpus
  text), so later lookups match the corpus's own recurring phrases: on the vLLM server at k=4
  about 3 drafts per prompt, mean acceptance length ~2.1.
- ``chat``: short chat messages for chat-completion smoke tests (the target answers them with
  corpus-like text and may close its turn).

``build_training_prompts`` cuts the DFlash drafter's training prompts from the same corpus with
another seed: the same kinds of text (prose and code snippets, the corpus's questions, short
requests), none equal to a bench prompt, written as the drafter training's JSONL dataset.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Iterable
from typing import Any

from dflashops.lab.models.layout import read_corpus

KIND_DECAY = "decay"
KIND_NGRAM = "ngram"
KIND_CHAT = "chat"

DECAY_PROMPTS = 16
NGRAM_PROMPTS = 8
NGRAM_REPEATS = 4
MAX_TOKENS = 32

# The drafter's training prompts, by kind; chat turns all (the data stage asks the target over
# its chat API), so a request like the bench's reference prompt is in the mix too.
TRAINING_SEED = 1000
TRAINING_PROSE = 160
TRAINING_CODE = 128
TRAINING_QUESTIONS = 48
TRAINING_REQUESTS = 48
REQUEST_TEMPLATES = (
    "Tell me about {}.",
    "Explain {} in detail.",
    "Write a few lines about {}.",
    "Describe {}.",
)
QUESTION = re.compile(r'"([^"]{8,80}\?)"')
# "the iron gate." — a noun phrase closing a clause, the subject of a request
NOUN_PHRASE = re.compile(r"\b(?:the|a) [a-z]+ [a-z]+(?=[.,])")


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


def build_training_prompts(seed: int = 0) -> list[dict[str, Any]]:
    """The drafter's training prompts (``{"id", "prompt"}``), deterministic for ``seed``."""
    rng = random.Random(seed + TRAINING_SEED)
    code, prose = read_corpus()
    bench_records = build_prompts(seed)
    bench = {r.get("prompt") for r in bench_records}
    bench |= {m["content"] for r in bench_records for m in r.get("messages", [])}
    questions = sorted({" ".join(q.split()) for q in QUESTION.findall(prose)})
    phrases = sorted({" ".join(p.split()) for p in NOUN_PHRASE.findall(prose)})
    kinds: tuple[tuple[str, int, Callable[[], str]], ...] = (
        ("prose", TRAINING_PROSE, lambda: _snippet(prose, rng, rng.randrange(40, 200))),
        ("code", TRAINING_CODE, lambda: _code_lines(code, rng, rng.randrange(1, 5))),
        ("question", TRAINING_QUESTIONS, lambda: _question(prose, questions, rng)),
        (
            "request",
            TRAINING_REQUESTS,
            lambda: rng.choice(REQUEST_TEMPLATES).format(rng.choice(phrases)),
        ),
    )
    records: list[dict[str, Any]] = []
    seen = set(bench)  # the bench measures on prompts the drafter never saw
    for kind, count, make in kinds:
        made = 0
        while made < count:
            text = make()
            if text not in seen:
                seen.add(text)
                records.append({"id": f"train-{kind}-{made}", "prompt": text})
                made += 1
    return records


def _code_lines(code: str, rng: random.Random, count: int) -> str:
    """``count`` consecutive non-blank lines of ``code``, indentation kept."""
    lines = [line for line in code.splitlines() if line.strip()]
    start = rng.randrange(0, len(lines) - count)
    return "\n".join(lines[start : start + count])


def _question(prose: str, questions: list[str], rng: random.Random) -> str:
    question = rng.choice(questions)
    return question if rng.random() < 0.5 else f"{_snippet(prose, rng, 60)} {question}"


def _request(prose: str, rng: random.Random) -> str:
    words = _snippet(prose, rng, 20).rstrip('.,;:!?"').split()[:5]
    return rng.choice(REQUEST_TEMPLATES).format(" ".join(words))


def dump_jsonl(records: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in records)
