"""``tune --load``'s schedule: vLLM's ``num_speculative_tokens_per_batch_size`` rendered from
k*(level), the engine versions that take it, and the single k (with its reason) for the rest."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from dflashops.errors import TuneInputError
from dflashops.tune.load_schedule import batch_points, build_schedule, decide
from dflashops.tune.schedule import (
    ScheduleRange,
    SpeculativeSchedule,
    check_schedule,
    render_schedule,
    schedule_support,
)
from tests.unit.test_stepcost_gpu_numbers import H200_PLAIN_STEP_S, H200_STEP_S
from tests.unit.test_tune_load import CPU_CURVE, GPU_CURVE, cpu_step, sweep

VLLM = schedule_support("vllm", "0.32.0")


def test_schedule_covers_one_to_max_num_seqs_and_merges_equal_neighbours() -> None:
    schedule = render_schedule({1: 4, 2: 4, 4: 2, 8: 2, 16: 0, 32: 0}, 64)
    assert schedule.as_vllm() == [[1, 2, 4], [3, 11, 2], [12, 64, 0]]
    assert schedule.max_k == 4
    assert [schedule.k_at(b) for b in (1, 2, 3, 11, 12, 64, 500)] == [4, 4, 2, 2, 0, 0, 0]
    assert schedule.describe() == "batch 1-2: k=4, 3-11: k=2, 12-64: off"
    assert schedule.notes == ("batch sizes 33-64 were not measured: they keep speculation off "
                              "from batch 32",)  # fmt: skip
    # vLLM's own rules accept what dflashops writes
    assert check_schedule(schedule.as_vllm()) == [(1, 2, 4), (3, 11, 2), (12, 64, 0)]


def test_levels_above_one_start_at_one_and_levels_past_max_num_seqs_are_dropped() -> None:
    schedule = render_schedule({4: 3, 16: 1, 512: 0}, 256)
    assert schedule.as_vllm() == [[1, 8, 3], [9, 256, 1]]
    assert any("[512] exceed max_num_seqs 256" in note for note in schedule.notes)
    assert render_schedule({1: 5}, 1).as_vllm() == [[1, 1, 5]]


def test_the_switch_between_levels_follows_the_model() -> None:
    result = sweep(cpu_step, CPU_CURVE, (0, 1, 2, 4, 8), tolerance=0)
    assert batch_points(result) == {1: 4, 2: 3, 4: 2, 8: 1, 16: 1, 32: 0}
    schedule = build_schedule(result, 64)
    ranges = schedule.as_vllm()
    assert ranges[0] == [1, 1, 4] and ranges[-1][1:] == [64, 0]
    # on this machine k=1 and k=0 break even at batch 18.5 (1.8·(13 + 2B) = 16 + 4B ms):
    # the model switches near it, earlier than the geometric midpoint of 16 and 32 (22.6)
    off_from = ranges[-1][0]
    assert 18 <= off_from <= 21
    assert render_schedule(result.k_by_level, 64).as_vllm()[-1][0] == 23


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([], "must not be empty"),
        ([[1, 4]], r"\[range_start, range_end, k\]"),
        ([[0, 4, 2]], "must be positive"),
        ([[1, 4, -1]], ">= 0"),
        ([[1, 8, 2], [5, 16, 1]], "non-overlapping"),
        ([[2, 8, 2]], "must start at 1"),
        ([[1, 8, 2], [6, 4, 1]], "start must be <= end"),
    ],
)
def test_vllm_rules_refuse_what_vllm_refuses(entries: list[list[int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_schedule(entries)


def test_a_schedule_value_has_no_gaps_and_ends_at_max_num_seqs() -> None:
    with pytest.raises(ValidationError, match="gap between 2 and 4"):
        SpeculativeSchedule(
            ranges=(ScheduleRange(start=1, end=2, k=3), ScheduleRange(start=4, end=8, k=0)),
            max_num_seqs=8,
        )
    with pytest.raises(ValidationError, match="end at max_num_seqs 16"):
        SpeculativeSchedule(ranges=(ScheduleRange(start=1, end=8, k=3),), max_num_seqs=16)


# --- engine versions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "version", "supported"),
    [
        ("vllm", "0.20.0", False),
        ("vllm", "0.23.0", False),
        ("vllm", "0.24.0", True),
        ("vllm", "0.26.0", True),
        ("vllm", "0.32.0", True),
        ("vllm", "0.34.0", True),
        ("vllm", "0.24.0rc1", True),
        ("sglang", "0.5.23", False),
    ],
)
def test_which_engine_versions_take_the_schedule(
    engine: str, version: str, supported: bool
) -> None:
    support = schedule_support(engine, version)
    assert support.supported is supported
    assert version in support.reason


def test_the_gate_names_the_field_the_version_and_the_source() -> None:
    old = schedule_support("vllm", "0.23.0")
    assert old.reason == (
        "vLLM 0.23.0 has no speculative_config.num_speculative_tokens_per_batch_size: it first "
        "appears in vLLM 0.24.0"
    )
    assert "vllm/config/speculative.py" in old.source
    assert "V2 model runner does not take it" in schedule_support("vllm", "0.24.0").reason
    assert "piecewise" in schedule_support("vllm", "0.32.0").reason


# --- what the server runs ----------------------------------------------------------------------


def test_an_engine_without_the_option_gets_the_mix_best_k_and_says_why() -> None:
    result = sweep(cpu_step, CPU_CURVE, (0, 1, 4, 8), tolerance=0)
    decision = decide(result, schedule_support("vllm", "0.22.0"), 64)
    assert decision.kind == "single_k" and decision.k == 1
    assert result.single_k is not None and result.single_k.k == 1
    assert decision.sentence.startswith(
        "vLLM 0.22.0 has no speculative_config.num_speculative_tokens_per_batch_size: it first "
        "appears in vLLM 0.24.0: one k for every batch size instead; k=1 maximises aggregate "
        "output tok/s over the load mix (every level alike)"
    )
    assert not decision.needs_verification and decision.vllm_schedule is None
    # the schedule it would have run stays in the decision, for the report
    assert decision.schedule.as_vllm()[-1][2] == 0


def test_a_schedule_is_served_with_its_largest_k_and_verified() -> None:
    result = sweep(cpu_step, CPU_CURVE, (0, 1, 4, 8), tolerance=0)
    decision = decide(result, VLLM, 64)
    assert decision.kind == "schedule" and decision.needs_verification
    assert decision.k == 4 == decision.schedule.max_k
    assert decision.vllm_schedule == decision.schedule.as_vllm()
    assert "served with num_speculative_tokens 4" in decision.sentence


def test_one_k_everywhere_needs_no_schedule() -> None:
    def flat(batch: int, k: int) -> float:
        return H200_PLAIN_STEP_S if k == 0 else H200_STEP_S[1]

    result = sweep(flat, GPU_CURVE, (0, 4, 8), k_max=8)
    assert set(result.k_by_level.values()) == {8}
    decision = decide(result, VLLM, 256)
    assert decision.kind == "single_k" and decision.k == 8
    assert "k*=8 at every level (c=1..32): one k, no schedule" in decision.sentence


def test_speculation_losing_everywhere_turns_it_off() -> None:
    def crowded(batch: int, k: int) -> float:
        return cpu_step(32 * (batch + 1), k)

    result = sweep(crowded, CPU_CURVE, (0, 1, 4), tolerance=0)
    assert set(result.k_by_level.values()) == {0} and result.stops_paying_at == 1
    decision = decide(result, VLLM, 64)
    assert decision.kind == "off" and decision.k == 0
    assert "speculation off wins at every level" in decision.sentence


def test_no_single_k_without_every_level_scored() -> None:
    result = sweep(cpu_step, CPU_CURVE, (0, 4), load_mix={1: 1.0})
    unscored = result.model_copy(update={"single_k": None})
    with pytest.raises(TuneInputError, match="no single k"):
        decide(unscored, schedule_support("sglang", "0.5.23"), 64)
