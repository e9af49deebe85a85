"""SGLang's spec-decode numbers from its ``/metrics`` (``--enable-metrics``), in vLLM's terms.

What SGLang exposes (``srt/observability/metrics_collector.py``, read in the 0.5.16 wheel):

- counters, bumped once per *finished* request (``observe_one_finished_request``):
  ``sglang:generation_tokens_total`` (its completion tokens), ``sglang:num_requests_total`` and
  ``sglang:spec_verify_calls_total`` (its verify forwards, the request's ``spec_verify_ct``;
  only bumped by a request that verified, so absent until one did);
- gauges, set at each decode log line (every ``--decode-log-interval`` decode steps, that
  window's own numbers): ``sglang:spec_accept_length``, ``sglang:spec_accept_rate``,
  ``sglang:spec_num_steps``, ``sglang:spec_num_draft_tokens``.

A speculating request's first token comes from prefill and every verify forward emits its
accepted drafts plus one, so per request completion = 1 + verify calls + accepted drafts. Summed
over requests: vLLM's drafts = verify calls, accepted = completion − verify calls − requests
(a request that never verified, e.g. a 1-token probe, adds 1 − 0 − 1 = 0), and draft tokens =
verify calls × (n − 1) with n the verify window (``sglang:spec_num_draft_tokens``, the current
token counted: dflashops renders k + 1). So ``1 + accepted / drafts`` and ``accepted / draft
tokens`` are vLLM's acceptance length and rate over the same requests; SGLang's own
``spec_accept_length`` (completion / verify calls) counts the prefill token too and reads a
little higher for short answers. SGLang counts no acceptance per position.

The limit is SGLang's: the counters move only when a request finishes, so a window holds the
requests that finished in it (a benchmark scrapes after its requests are done).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dflashops.metrics.prometheus import Scrape

PREFIX = "sglang:"
GENERATION_TOKENS = "sglang:generation_tokens_total"
REQUESTS = "sglang:num_requests_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"
NUM_DRAFT_TOKENS = "sglang:spec_num_draft_tokens"
NUM_STEPS = "sglang:spec_num_steps"
# the label SGLang puts the served model's name in (as vLLM does)
MODEL_LABEL = "model_name"


def is_sglang(scrape: Scrape) -> bool:
    """Whether the scrape is an SGLang server's (any ``sglang:`` family)."""
    return any(name.startswith(PREFIX) for name in scrape.sample_names())


@dataclass(frozen=True)
class SglangCounts:
    """One SGLang scrape, cumulative, in vLLM's spec-decode terms."""

    speculating: bool
    """A request has verified, or the spec gauges are set (SGLang has no other sign)."""
    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    generation_tokens: int | None


def sglang_counts(scrape: Scrape, *, model_name: str | None = None) -> SglangCounts:
    """Read one scrape; ``model_name`` keeps only that served model's series."""
    labels = {MODEL_LABEL: model_name} if model_name else {}
    generated = scrape.count(GENERATION_TOKENS, **labels)
    verify = scrape.count(VERIFY_CALLS, **labels)
    requests = scrape.count(REQUESTS, **labels) or 0
    window = _gauge(scrape, NUM_DRAFT_TOKENS, labels)
    if not window:
        steps = _gauge(scrape, NUM_STEPS, labels)
        window = steps + 1.0 if steps else None  # a chain: steps drafts and the current token
    drafts = verify or 0
    accepted = max(0, (generated or 0) - drafts - requests) if drafts else 0
    return SglangCounts(
        speculating=verify is not None or bool(window),
        num_drafts=drafts,
        num_draft_tokens=drafts * (round(window) - 1) if window and window >= 2 else 0,
        num_accepted_tokens=accepted,
        generation_tokens=generated,
    )


def _values(scrape: Scrape, name: str, labels: dict[str, str]) -> list[float]:
    return [s.value for s in scrape.samples(name, **labels)]


def _gauge(scrape: Scrape, name: str, labels: dict[str, str]) -> float | None:
    values = [v for v in _values(scrape, name, labels) if not math.isnan(v)]
    return max(values) if values else None
