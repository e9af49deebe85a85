"""vLLM's batch-size schedule for ``num_speculative_tokens``, and which engines take it.

``speculative_config.num_speculative_tokens_per_batch_size`` (vLLM ``vllm/config/speculative.py``,
type ``list[tuple[int, int, int]] | None``) is a list of inclusive batch-size ranges
``[range_start, range_end, k]``. ``vllm/v1/spec_decode/dynamic/utils.py`` validates it: a
non-empty list of 3-item entries, both ends positive, start ≤ end, k ≥ 0, ranges sorted and
non-overlapping, the first starting at 1. At run time the scheduler looks the running batch size
up in a dense table: a gap between ranges and the tail past the last range carry the previous
k forward, every k is capped at ``num_speculative_tokens`` (the startup maximum, which sizes the
buffers), and k = 0 is a plain decode step. So a schedule is served with
``num_speculative_tokens`` = its largest k.

Read in the released sources: absent in vLLM 0.23.0, present from 0.24.0 (also 0.25.0, 0.32.0
and 0.34.0, same rules). Costs and limits that go with it: on the V1 model runner it turns full
CUDA graphs into piecewise ones (``vllm/config/vllm.py``,
``_maybe_override_dynamic_sd_cudagraph_mode``; vllm#49548 measured −14 % single-stream); 0.24.0's
V2 model runner does not take it (vLLM falls back to V1, or refuses with
``VLLM_USE_V2_MODEL_RUNNER=1``); 0.32.0 drops it under data parallelism.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dflashops.playbook.schedule import VLLM_FIELD, check_schedule

__all__ = [
    "VLLM_FIELD",
    "ScheduleRange",
    "ScheduleSupport",
    "SpeculativeSchedule",
    "check_schedule",
    "render_schedule",
    "schedule_support",
]

VLLM_FIRST_VERSION = (0, 24, 0)
VLLM_SOURCE = (
    "vllm/config/speculative.py (the field), vllm/v1/spec_decode/dynamic/utils.py (its rules)"
)

# prefer_upper(batch, low, high): whether ``batch``, between the measured batch sizes low and
# high, is better served by high's k than by low's
Preference = Callable[[int, int, int], bool]


class ScheduleRange(BaseModel):
    """Batch sizes ``start``..``end`` (inclusive) run ``k`` draft tokens; 0: no speculation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: int = Field(ge=1)
    end: int = Field(ge=1)
    k: int = Field(ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ScheduleRange:
        if self.start > self.end:
            raise ValueError(f"range {self.start}-{self.end}: start is above end")
        return self

    def describe(self) -> str:
        span = str(self.start) if self.start == self.end else f"{self.start}-{self.end}"
        return f"{span}: {'off' if self.k == 0 else f'k={self.k}'}"


class SpeculativeSchedule(BaseModel):
    """Ranges covering batch sizes 1..``max_num_seqs`` without gaps, adjacent ks distinct."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    ranges: tuple[ScheduleRange, ...] = Field(min_length=1)
    max_num_seqs: int = Field(ge=1)
    notes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _covers(self) -> SpeculativeSchedule:
        check_schedule([[r.start, r.end, r.k] for r in self.ranges])
        for before, after in zip(self.ranges, self.ranges[1:], strict=False):
            if after.start != before.end + 1:
                raise ValueError(f"gap between {before.end} and {after.start}")
        if self.ranges[-1].end != self.max_num_seqs:
            raise ValueError(f"the last range must end at max_num_seqs {self.max_num_seqs}")
        return self

    @property
    def max_k(self) -> int:
        """``num_speculative_tokens`` to serve it with (vLLM caps every k at that)."""
        return max(r.k for r in self.ranges)

    @property
    def is_static(self) -> bool:
        return len(self.ranges) == 1

    def k_at(self, batch: int) -> int:
        for item in self.ranges:
            if item.start <= batch <= item.end:
                return item.k
        return self.ranges[-1].k  # vLLM carries the last k past the last range

    def as_vllm(self) -> list[list[int]]:
        """The value of ``speculative_config.num_speculative_tokens_per_batch_size``."""
        return [[r.start, r.end, r.k] for r in self.ranges]

    def describe(self) -> str:
        return "batch " + ", ".join(r.describe() for r in self.ranges)


def render_schedule(
    k_by_batch: Mapping[int, int],
    max_num_seqs: int,
    *,
    prefer_upper: Preference | None = None,
) -> SpeculativeSchedule:
    """The schedule through the measured batch sizes' k*, covering 1..``max_num_seqs``.

    Below the smallest measured batch its k holds; between two measured batches with different
    k the switch is the first batch ``prefer_upper`` gives to the upper one (default: past the
    geometric midpoint, the middle of a doubling ladder); past the largest measured batch its k
    holds, as vLLM itself carries it, and a note says those sizes were not measured.
    """
    if not k_by_batch:
        raise ValueError("no measured batch size to build a schedule from")
    prefer = prefer_upper or _past_geometric_midpoint
    notes: list[str] = []
    points = sorted(k_by_batch.items())
    beyond = [batch for batch, _ in points if batch > max_num_seqs]
    if beyond:
        notes.append(
            f"batch size(s) {beyond} exceed max_num_seqs {max_num_seqs}: the engine never runs "
            "them, left out"
        )
        points = [(batch, k) for batch, k in points if batch <= max_num_seqs] or [points[0]]
    ks = [0] * (max_num_seqs + 1)  # index 0 unused: ks[batch]
    for batch in range(1, max_num_seqs + 1):
        ks[batch] = points[-1][1]  # past the last measured batch: its k, as vLLM carries it
    for batch in range(1, points[0][0] + 1):
        ks[batch] = points[0][1]
    for (low, k_low), (high, k_high) in pairwise(points):
        switch = _switch(low, high, prefer) if k_low != k_high else low + 1
        for batch in range(low + 1, high + 1):
            ks[batch] = k_low if batch < switch else k_high
    last = points[-1][0]
    if last < max_num_seqs:
        notes.append(
            f"batch sizes {last + 1}-{max_num_seqs} were not measured: they keep "
            f"{_k_words(points[-1][1])} from batch {last}"
        )
    return SpeculativeSchedule(ranges=_merge(ks), max_num_seqs=max_num_seqs, notes=tuple(notes))


def _switch(low: int, high: int, prefer: Preference) -> int:
    """The first batch after ``low`` that goes to ``high``'s k (``high`` itself at the latest):
    one switch per interval, so noise between two levels cannot add thresholds."""
    return next((batch for batch in range(low + 1, high) if prefer(batch, low, high)), high)


def _past_geometric_midpoint(batch: int, low: int, high: int) -> bool:
    return batch > math.sqrt(low * high)


def _merge(ks: Sequence[int]) -> tuple[ScheduleRange, ...]:
    ranges: list[ScheduleRange] = []
    start = 1
    for batch in range(2, len(ks) + 1):
        if batch == len(ks) or ks[batch] != ks[start]:
            ranges.append(ScheduleRange(start=start, end=batch - 1, k=ks[start]))
            start = batch
    return tuple(ranges)


def _k_words(k: int) -> str:
    return "speculation off" if k == 0 else f"k={k}"


class ScheduleSupport(BaseModel):
    """Whether an engine release takes the batch-size schedule, and the source that says so."""

    model_config = ConfigDict(frozen=True)

    engine: str
    version: str
    supported: bool
    reason: str
    source: str = VLLM_SOURCE


def schedule_support(engine: str, version: str) -> ScheduleSupport:
    """vLLM from 0.24.0 takes ``num_speculative_tokens_per_batch_size``; earlier vLLM and
    SGLang (no such option wired in dflashops) get a single k."""
    if engine != "vllm":
        return ScheduleSupport(
            engine=engine,
            version=version,
            supported=False,
            reason=f"{engine} {version}: dflashops renders a batch-size schedule for vLLM only",
            source="dflashops.tune.schedule",
        )
    release = _release(version)
    first = ".".join(str(part) for part in VLLM_FIRST_VERSION)
    if release < VLLM_FIRST_VERSION:
        return ScheduleSupport(
            engine=engine,
            version=version,
            supported=False,
            reason=f"vLLM {version} has no speculative_config.{VLLM_FIELD}: it first appears "
            f"in vLLM {first}",
        )
    caveat = (
        "; its V2 model runner does not take it (vLLM falls back to V1)"
        if release < (0, 25, 0)
        else ""
    )
    return ScheduleSupport(
        engine=engine,
        version=version,
        supported=True,
        reason=f"vLLM {version} takes speculative_config.{VLLM_FIELD} (since {first}); on the "
        f"V1 model runner it makes CUDA graphs piecewise{caveat}",
    )


def _release(version: str) -> tuple[int, int, int]:
    numbers = [int(part) for part in re.findall(r"\d+", version)[:3]]
    numbers += [0] * (3 - len(numbers))
    return numbers[0], numbers[1], numbers[2]
