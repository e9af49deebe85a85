"""A served batch-size schedule for ``num_speculative_tokens`` (``server.speculative_schedule``),
checked by vLLM's own rules so that a schedule a playbook names is one vLLM takes.

vLLM reads it as ``speculative_config.num_speculative_tokens_per_batch_size``: inclusive batch-size
ranges ``[start, end, k]`` (``vllm/config/speculative.py``; validated in
``vllm/v1/spec_decode/dynamic/utils.py``; from vLLM 0.24.0). ``dflashops.tune.schedule`` renders
one from measurements.
"""

from __future__ import annotations

from collections.abc import Sequence

VLLM_FIELD = "num_speculative_tokens_per_batch_size"


def check_schedule(entries: Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    """vLLM's rules for the schedule (``validate_and_normalize_dynamic_sd_schedule``), so a
    schedule dflashops writes is one vLLM takes; the entries sorted by start. Raises
    ``ValueError``. Kept free of dflashops imports: a playbook validator may call it."""
    if not entries:
        raise ValueError(f"{VLLM_FIELD} must not be empty")
    parsed: list[tuple[int, int, int]] = []
    for entry in entries:
        if len(entry) != 3:
            raise ValueError(f"each {VLLM_FIELD} entry is [range_start, range_end, k]")
        start, end, k = (int(value) for value in entry)
        if start <= 0 or end <= 0:
            raise ValueError(f"batch-size range ({start}, {end}) must be positive")
        if start > end:
            raise ValueError(f"batch-size range start must be <= end for ({start}, {end}, {k})")
        if k < 0:
            raise ValueError(f"{VLLM_FIELD} values must be >= 0")
        parsed.append((start, end, k))
    parsed.sort()
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise ValueError("batch-size ranges must be non-overlapping and sorted")
        previous_end = end
    if parsed[0][0] != 1:
        raise ValueError("the first batch-size range must start at 1")
    return parsed
