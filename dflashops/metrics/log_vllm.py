"""vLLM's periodic stats and spec-decode messages, V0 and V1, every version from 0.5 on.

Formats (from vLLM's sources and from real logs, see tests/fixtures/logs/public/):

- V1 stats, every ``VLLM_LOG_STATS_INTERVAL`` s while busy: ``[Engine 000: ]Avg prompt
  throughput: … tokens/s, Avg generation throughput: … tokens/s, Running: … reqs, Waiting: … reqs,
  [Deferred …, KV fetch …, Preemptions …,] GPU|CPU KV cache usage: …%[, Prefix cache hit rate:
  …%]`` (0.9.2–0.11.0 drop the ``Engine`` prefix; DP servers print one line per engine).
- V1 spec line right after it: 0.8.2-ish ``Speculative metrics: Draft acceptance rate: <fraction>,
  Number of accepted tokens: …, Number of draft tokens: …,`` (per interval); 0.8.3 ``SpecDecoding
  metrics: Draft acceptance rate: …%, Accepted: … tokens, Drafted: … tokens``; 0.8.5–0.10.1 adds
  ``Mean acceptance length`` and ``Per-position acceptance rate``; 0.10.2+ ``Mean acceptance
  length, Accepted throughput, Drafted throughput, Accepted, Drafted, Per-position acceptance
  rate, Avg Draft acceptance rate`` (a 0.10.2 dev build printed the rate first and no ``Avg``).
  Builds with an adaptive depth (local-inference-lab/vllm's acceptance-length controller, not
  upstream vLLM) add ``Current speculative depth: N`` after the mean acceptance length: the k
  the scheduler drafted with (its latest step's), while the per-position list keeps the
  configured maximum.
- V0 (0.5–0.7): ``Avg prompt throughput …, Running, Swapped, Pending, GPU KV cache usage, CPU KV
  cache usage.``, ``Prefix cache hit rate: GPU: …%, CPU: …%`` and ``Speculative metrics: Draft
  acceptance rate: <fraction>, System efficiency, Number of speculative tokens, Number of accepted
  tokens, Number of draft tokens, Number of emitted tokens.`` with counts since engine start (0.5.3
  printed ``Number of draft tokens tokens`` and ``Number of emitted tokens tokens``).

V0 counts a draft token as accepted even after an earlier one was rejected, so 1 + accepted/steps
overstates the acceptance length: the tokens per step are emitted / steps, where steps = draft
tokens / k (= system efficiency × (k + 1)). The tokens the output kept are emitted − steps.
"""

from __future__ import annotations

import math
import re

from dflashops.metrics.log_lines import read_float, read_int
from dflashops.metrics.log_models import SpecDecodeWindow, ThroughputWindow

NUM = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)|nan|inf)"
_RATE3 = r"(\d+\.\d{3}|nan)"  # V0 prints fractions with three decimals
_POSITION = re.compile(r"^\d+\.\d{3}$")
# ±0.005 from the printed MAL, ±0.0005 per printed per-position rate
_MAL_HALF_WIDTH, _POSITION_HALF_WIDTH = 0.005, 0.0005


def stats_window(base: dict[str, object], message: str) -> ThroughputWindow:
    """A V0 or V1 periodic stats line (``base``: header fields, ``engine`` included)."""
    fields: dict[str, object] = {
        "prompt_throughput": read_float(message, r"Avg prompt throughput: " + NUM + " tokens/s"),
        "generation_throughput": read_float(
            message, r"Avg generation throughput: " + NUM + " tokens/s"
        ),
        "running": read_int(message, r"Running: (\d+) reqs"),
        "waiting": read_int(message, r"Waiting: (\d+) reqs"),
        "swapped": read_int(message, r"Swapped: (\d+) reqs"),
        "pending": read_int(message, r"Pending: (\d+) reqs"),
        "deferred": read_int(message, r"Deferred: (\d+) reqs"),
        "preemptions": read_int(message, r"Preemptions: (\d+)(?=,)"),
        "corrupted": read_int(message, r"Corrupted: (\d+) reqs"),
        "prefix_cache_hit_rate_pct": read_float(
            message, r"(?<!External )Prefix cache hit rate: " + NUM + "%"
        ),
        "external_prefix_cache_hit_rate_pct": read_float(
            message, r"External prefix cache hit rate: " + NUM + "%"
        ),
        "mm_cache_hit_rate_pct": read_float(message, r"MM cache hit rate: " + NUM + "%"),
    }
    fetch = re.search(
        r"KV fetch: (\d+) waiting to start, (\d+) in progress, (\d+) completed waiting", message
    )
    if fetch:
        fields["kv_fetch_waiting"], fields["kv_fetch_in_progress"] = fetch[1], fetch[2]
        fields["kv_fetch_completed_waiting"] = fetch[3]
    # the device word is bounded: "(\w+) " backtracks quadratically over a long hostile word
    usages = re.findall(r"(?:(?<!\w)(\w{1,16}) )?KV cache usage: " + NUM + "%", message)
    if usages:
        fields["kv_cache_device"] = usages[0][0] or None
        fields["kv_cache_usage_pct"] = float(usages[0][1])
    if "Swapped:" in message:  # V0: GPU usage, then the CPU swap space's usage
        base = {**base, "source": "vllm-v0"}
        if len(usages) > 1:
            fields["cpu_kv_cache_usage_pct"] = float(usages[1][1])
    # every version prints the KV cache usage, the last part V0 always has
    fields["truncated"] = not usages or ("Swapped:" in message and len(usages) < 2)
    return ThroughputWindow.model_validate({**base, **fields})


def spec_window(base: dict[str, object], message: str) -> SpecDecodeWindow | None:
    """A V1 ``SpecDecoding metrics`` line (or one whose prefix was lost); None if not one."""
    accepted = read_int(message, r"\bAccepted: (\d+) tokens")
    drafted = read_int(message, r"Drafted: (\d+) tokens")
    mal = read_float(message, r"Mean acceptance length: (\d+\.\d{2}|nan)(?=,)")
    if not message.startswith("SpecDecoding metrics:") and drafted is None:
        return None  # "Mean acceptance length" elsewhere (a benchmark's summary), not this line
    rate = read_float(message, r"Avg Draft acceptance rate: " + NUM + "%")
    if rate is None:
        rate = read_float(message, r"(?<!Avg )Draft acceptance rate: " + NUM + "%")
    positions, cut = _positions(message, accepted, mal)
    depth = read_int(message, r"Current speculative depth: (\d+)(?=,|\s*$)")
    # 0.10.2+ ends with the average rate (a dev build printed it first): none at all means cut
    no_rate = "Accepted throughput:" in message and "Draft acceptance rate:" not in message
    truncated = cut or drafted is None or no_rate
    return SpecDecodeWindow.model_validate(
        {
            **base,
            "mean_acceptance_length": mal,
            "accepted_tokens": accepted,
            "drafted_tokens": drafted,
            "acceptance_rate_pct": rate,
            "acceptance_rate_formula": "accepted/drafted",
            "draft_acceptance_rate_pct": (
                100.0 * accepted / drafted if accepted is not None and drafted else rate
            ),
            "accepted_throughput": read_float(
                message, r"Accepted throughput: " + NUM + " tokens/s"
            ),
            "drafted_throughput": read_float(message, r"Drafted throughput: " + NUM + " tokens/s"),
            "per_position_acceptance": positions,
            "num_spec_tokens": depth or len(positions) or None,
            "truncated": truncated,
        }
    )


def _positions(message: str, accepted: int | None, mal: float | None) -> tuple[list[float], bool]:
    """The per-position rates, and whether the list was cut (then it is dropped)."""
    found = re.search(
        r"Per-position acceptance rate: (.*?)(?:, Avg Draft acceptance rate|$)", message
    )
    if not found:
        return [], False
    parts = [part.strip() for part in found[1].split(",") if part.strip()]
    if not all(_POSITION.match(part) for part in parts):
        return [], True  # a rate cut mid-number (or garbled): the list cannot be trusted
    positions = [float(part) for part in parts]
    if positions and accepted and mal is not None and mal > 1:
        # the rates sum to accepted / drafts = MAL - 1: a list cut at a comma sums short
        slack = _MAL_HALF_WIDTH + _POSITION_HALF_WIDTH * len(positions) + 1e-9
        if math.fsum(positions) < mal - 1.0 - slack:
            return [], True
    return positions, False


def spec_window_v0(base: dict[str, object], message: str) -> SpecDecodeWindow:
    """A ``Speculative metrics`` line: V0's (cumulative) or early V1's (per interval, no k)."""
    fraction = read_float(message, r"Draft acceptance rate: " + _RATE3 + r"(?=,)")
    accepted = read_int(message, r"Number of accepted tokens: (\d+)(?=,)")
    drafted = read_int(message, r"Number of draft tokens(?: tokens)?: (\d+)(?=,)")
    rate = None if fraction is None else 100.0 * fraction
    if "System efficiency" not in message and "emitted" not in message:
        # vLLM V1 before 0.8.3 kept V0's wording for three per-interval numbers
        return SpecDecodeWindow.model_validate(
            {
                **base,
                "accepted_tokens": accepted,
                "drafted_tokens": drafted,
                "acceptance_rate_pct": rate,
                "acceptance_rate_formula": "accepted/drafted",
                "draft_acceptance_rate_pct": (
                    100.0 * accepted / drafted if accepted is not None and drafted else rate
                ),
                "truncated": drafted is None,
            }
        )
    k = read_int(message, r"Number of speculative tokens: (\d+)(?=,)")
    emitted = read_int(message, r"Number of emitted tokens(?: tokens)?: (\d+)\.")
    steps = drafted // k if k and drafted is not None else None
    return SpecDecodeWindow.model_validate(
        {
            **base,
            "source": "vllm-v0",
            "acceptance_rate_pct": rate,
            "acceptance_rate_formula": "v0-accepted/drafted",
            "system_efficiency": read_float(message, r"System efficiency: " + _RATE3 + r"(?=,)"),
            "num_spec_tokens": k,
            "accepted_tokens": accepted,
            "drafted_tokens": drafted,
            "emitted_tokens": emitted,
            "mean_acceptance_length": emitted / steps if steps and emitted is not None else None,
            "draft_acceptance_rate_pct": (
                100.0 * (emitted - steps) / drafted
                if steps and emitted is not None and drafted
                else None
            ),
            "cumulative": True,
            "truncated": emitted is None,
        }
    )


def prefix_cache_v0(message: str) -> tuple[float | None, float | None]:
    """V0's separate ``Prefix cache hit rate: GPU: …%, CPU: …%`` line: (GPU, CPU)."""
    return (
        read_float(message, r"GPU: " + NUM + "%"),
        read_float(message, r"CPU: " + NUM + "%"),
    )
