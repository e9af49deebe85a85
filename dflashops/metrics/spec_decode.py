"""Spec-decode acceptance over a window, from two scrapes of a vLLM server's ``/metrics``.

The counters are cumulative since the server started, so a benchmark scrapes before and after
and takes the difference, as ``vllm bench serve`` does:

- acceptance length = 1 + accepted / drafts (mean tokens per verify step, bonus token included)
- acceptance rate = accepted / draft tokens
- per-position acceptance = accepted at position i / drafts

The counters cover the whole server: traffic from other clients during the window is counted too.
An SGLang server's counters are read in the same terms (``spec_sglang``: no per-position
counts, and only requests that finished count). vLLM V0 (0.6.x) has no ``num_drafts``
counter; there every verify step emits its accepted tokens plus one, so drafts = emitted −
accepted (derived).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, computed_field

from dflashops.errors import BenchmarkError, ParseError
from dflashops.metrics.prometheus import Sample, Scrape
from dflashops.metrics.spec_sglang import is_sglang, sglang_counts

PREFIX = "vllm:spec_decode_"
NUM_DRAFTS = "vllm:spec_decode_num_drafts"
NUM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
NUM_ACCEPTED_TOKENS = "vllm:spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
NUM_EMITTED_TOKENS = "vllm:spec_decode_num_emitted_tokens"  # V0 only
GENERATION_TOKENS = "vllm:generation_tokens"


class SpecDecodeCounters(BaseModel):
    """The cumulative counters of one scrape, summed over engines (and filtered by model)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    spec_decode: bool
    """Whether the server exposes any spec-decode counter (False: not speculating)."""
    num_drafts: int | None
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: dict[int, int]
    num_emitted_tokens: int | None = None
    generation_tokens: int | None = None

    @classmethod
    def from_scrape(
        cls, scrape: str | Scrape, *, model_name: str | None = None
    ) -> SpecDecodeCounters:
        """Read the counters; ``model_name`` keeps only that served model's series."""
        if isinstance(scrape, str):
            scrape = Scrape.parse(scrape)
        if not any(name.startswith(PREFIX) for name in scrape.sample_names()) and is_sglang(scrape):
            return cls.from_sglang(scrape, model_name=model_name)
        labels = {"model_name": model_name} if model_name else {}
        per_position: dict[int, int] = {}
        for sample in _counter_samples(scrape, ACCEPTED_PER_POS, labels):
            raw = sample.labels.get("position", "")
            if not raw.isdigit():
                continue
            per_position[int(raw)] = per_position.get(int(raw), 0) + _count(sample.value)
        drafts = _counter(scrape, NUM_DRAFTS, labels)
        emitted = _counter(scrape, NUM_EMITTED_TOKENS, labels)
        return cls(
            spec_decode=any(
                name.startswith(PREFIX) and (not model_name or bool(scrape.samples(name, **labels)))
                for name in scrape.sample_names()
            ),
            num_drafts=drafts,
            num_draft_tokens=_counter(scrape, NUM_DRAFT_TOKENS, labels) or 0,
            num_accepted_tokens=_counter(scrape, NUM_ACCEPTED_TOKENS, labels) or 0,
            accepted_per_position=dict(sorted(per_position.items())),
            num_emitted_tokens=emitted,
            generation_tokens=_counter(scrape, GENERATION_TOKENS, labels),
        )

    @classmethod
    def from_sglang(cls, scrape: Scrape, *, model_name: str | None = None) -> SpecDecodeCounters:
        """An SGLang scrape in vLLM's terms (see ``spec_sglang``)."""
        counts = sglang_counts(scrape, model_name=model_name)
        return cls(
            spec_decode=counts.speculating,
            num_drafts=counts.num_drafts,
            num_draft_tokens=counts.num_draft_tokens,
            num_accepted_tokens=counts.num_accepted_tokens,
            accepted_per_position={},
            generation_tokens=counts.generation_tokens,
        )


class SpecDecodeDelta(BaseModel):
    """What happened between two scrapes."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    spec_decode: bool = True
    """False when the server exposes no spec-decode counters: the spec fields are then empty."""
    num_drafts: int | None
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: list[int]
    num_emitted_tokens: int | None = None
    generation_tokens: int | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance_length(self) -> float | None:
        """1 + accepted / drafts; None when nothing was drafted."""
        if not self.num_drafts:
            return None
        return 1.0 + self.num_accepted_tokens / self.num_drafts

    @computed_field  # type: ignore[prop-decorator]
    @property
    def acceptance_rate(self) -> float | None:
        """accepted / draft tokens, a fraction in [0, 1]; None when nothing was drafted."""
        if not self.num_draft_tokens:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens

    @computed_field  # type: ignore[prop-decorator]
    @property
    def per_position_acceptance(self) -> list[float]:
        """accepted at position i / drafts (empty when drafts are unknown or zero)."""
        if not self.num_drafts:
            return []
        return [accepted / self.num_drafts for accepted in self.accepted_per_position]

    def vllm_bench_keys(self) -> dict[str, Any]:
        """The keys ``vllm bench serve`` writes; note its acceptance rate is in percent."""
        rate = self.acceptance_rate
        return {
            "spec_decode_acceptance_length": self.acceptance_length,
            "spec_decode_acceptance_rate": None if rate is None else 100.0 * rate,
            "spec_decode_num_drafts": self.num_drafts,
            "spec_decode_draft_tokens": self.num_draft_tokens,
            "spec_decode_accepted_tokens": self.num_accepted_tokens,
            "spec_decode_per_position_acceptance_rates": self.per_position_acceptance,
        }


def delta(before: SpecDecodeCounters, after: SpecDecodeCounters) -> SpecDecodeDelta:
    """``after − before``; raises ``BenchmarkError`` when a counter went backwards (a restart)."""

    def diff(name: str, old: int | None, new: int | None) -> int | None:
        if old is None or new is None:
            return None
        if new < old:
            raise BenchmarkError(
                f"server counter {name} went backwards ({old} -> {new})",
                hint="the server restarted between the two scrapes; run the benchmark again",
            )
        return new - old

    positions = range(
        max([*before.accepted_per_position, *after.accepted_per_position], default=-1) + 1
    )
    per_position = [
        diff(
            f"{ACCEPTED_PER_POS}[{pos}]",
            before.accepted_per_position.get(pos, 0),
            after.accepted_per_position.get(pos, 0),
        )
        or 0
        for pos in positions
    ]
    accepted = diff(NUM_ACCEPTED_TOKENS, before.num_accepted_tokens, after.num_accepted_tokens)
    emitted = diff(NUM_EMITTED_TOKENS, before.num_emitted_tokens, after.num_emitted_tokens)
    drafts = diff(NUM_DRAFTS, before.num_drafts, after.num_drafts)
    if drafts is None and emitted is not None and accepted is not None:
        drafts = emitted - accepted  # V0: each verify step emits accepted + 1 tokens
    return SpecDecodeDelta(
        spec_decode=after.spec_decode,
        num_drafts=drafts,
        num_draft_tokens=diff(NUM_DRAFT_TOKENS, before.num_draft_tokens, after.num_draft_tokens)
        or 0,
        num_accepted_tokens=accepted or 0,
        accepted_per_position=per_position,
        num_emitted_tokens=emitted,
        generation_tokens=diff(
            GENERATION_TOKENS, before.generation_tokens, after.generation_tokens
        ),
    )


def _counter_samples(scrape: Scrape, base: str, labels: dict[str, str]) -> list[Sample]:
    # prometheus_client exposes counters with "_total"; accept a bare name from other exporters.
    return scrape.samples(f"{base}_total", **labels) or scrape.samples(base, **labels)


def _counter(scrape: Scrape, base: str, labels: dict[str, str]) -> int | None:
    # prometheus_client exposes counters with "_total"; accept a bare name from other exporters.
    total = scrape.count(f"{base}_total", **labels)
    return total if total is not None else scrape.count(base, **labels)


def _count(value: float) -> int:
    if not math.isfinite(value):
        raise ParseError(f"a spec-decode counter reads {value}, not a count")
    return round(value)
