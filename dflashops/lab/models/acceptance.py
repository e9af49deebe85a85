"""Offline greedy speculative decoding: per-position acceptance of a draft against a target.

It replays what vLLM does with ``temperature=0``: the draft proposes ``k`` tokens greedily, the
target scores the context plus the proposal in one pass, the longest matching prefix is
accepted and the target's next token is added as the bonus token. Per-position acceptance is
vLLM's ``accepted_at_position / num_drafts``. Runs inside the vLLM venv (needs torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AcceptanceResult:
    """Counts and rates of one simulated run (what vLLM's spec-decode counters would show)."""

    num_drafts: int
    accepted_per_position: tuple[int, ...]

    @property
    def per_position(self) -> tuple[float, ...]:
        if not self.num_drafts:
            return tuple(0.0 for _ in self.accepted_per_position)
        return tuple(n / self.num_drafts for n in self.accepted_per_position)

    @property
    def mean_acceptance_length(self) -> float:
        if not self.num_drafts:
            return 1.0
        return 1.0 + sum(self.accepted_per_position) / self.num_drafts


def _greedy_next(model: Any, ids: Sequence[int]) -> list[int]:
    """The model's argmax token after every position of ``ids``."""
    import torch  # type: ignore[import-not-found, unused-ignore]

    with torch.no_grad():
        logits = model(torch.tensor([list(ids)])).logits[0]
    return [int(t) for t in logits.argmax(dim=-1)]


def simulate(
    target: Any,
    draft: Any,
    prompts: Sequence[Sequence[int]],
    *,
    k: int = 4,
    max_new_tokens: int = 32,
) -> AcceptanceResult:
    """Run greedy speculative decoding of every prompt; count acceptance per draft position."""
    accepted = [0] * k
    num_drafts = 0
    for prompt in prompts:
        context = list(prompt)
        produced = 0
        while produced < max_new_tokens:
            proposal: list[int] = []
            for _ in range(k):
                proposal.append(_greedy_next(draft, context + proposal)[-1])
            verified = _greedy_next(target, context + proposal)[len(context) - 1 :]
            n_ok = 0
            while n_ok < k and proposal[n_ok] == verified[n_ok]:
                n_ok += 1
            for position in range(n_ok):
                accepted[position] += 1
            num_drafts += 1
            context += verified[: n_ok + 1]
            produced += n_ok + 1
    return AcceptanceResult(num_drafts=num_drafts, accepted_per_position=tuple(accepted))
