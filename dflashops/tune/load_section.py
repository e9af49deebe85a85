"""The ``load`` part of a ``tune`` section: what ``tune.json`` keeps and ``report`` plots.

Plain JSON, so ``report`` (a layer that does not import ``tune``) reads it as it reads the other
sections, and an older file with fewer keys still renders. Layout::

    {"mode": "load", "levels": [1, 2, 4], "objective": "...",
     "k_by_level": {"1": 4, "2": 3, "4": 0}, "stops_paying_at": 4,
     "predictions": [{"level": 1, "k": 0, "predicted_tok_s": .., "measured_tok_s": ..,
                      "tok_s": .., "tpot_ms": .., "meets_slo": ..}, ...],
     "runs": [LevelRun, ...], "verify": [LevelRun, ...],
     "decision": {"kind": "schedule", "k": 4, "schedule": [[1, 1, 4], ...], "sentence": ..,
                  "support": {...}},
     "verdict": ScheduleVerdict | null, "single_k": SingleK | null,
     "measured_single_k": SingleK | null,
     "acceptance": {"moves": .., "finding": .., "moved": [...]},
     "step_cost": {"smooth": "t(B, x) = ..", "plain": "t0(B) = .."},
     "warnings": [...], "assumptions": [...]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dflashops.tune.load_model import LoadResult
from dflashops.tune.load_runs import LevelRun
from dflashops.tune.load_schedule import ScheduleDecision
from dflashops.tune.load_verdict import ScheduleVerdict


def load_section(
    result: LoadResult,
    decision: ScheduleDecision,
    runs: Sequence[LevelRun],
    *,
    verify_runs: Sequence[LevelRun] = (),
    verdict: ScheduleVerdict | None = None,
) -> dict[str, Any]:
    """The JSON object for ``tune["load"]``."""
    check = result.acceptance_check
    costs = result.costs
    return {
        "mode": "load",
        "levels": list(result.settings.levels),
        "objective": result.settings.objective,
        "k_by_level": {str(level): k for level, k in result.k_by_level.items()},
        "stops_paying_at": result.stops_paying_at,
        "predictions": [
            {"level": choice.level, "batch": choice.batch, **row.model_dump(mode="json")}
            for choice in result.levels
            for row in choice.predictions
        ],
        "runs": [run.model_dump(mode="json") for run in runs],
        "verify": [run.model_dump(mode="json") for run in verify_runs],
        "decision": {
            "kind": decision.kind,
            "k": decision.k,
            "schedule": decision.schedule.as_vllm(),
            "schedule_notes": list(decision.schedule.notes),
            "sentence": decision.sentence,
            "support": decision.support.model_dump(mode="json"),
        },
        "verdict": None if verdict is None else verdict.model_dump(mode="json"),
        "single_k": None if result.single_k is None else result.single_k.model_dump(mode="json"),
        "measured_single_k": (
            None
            if result.measured_single_k is None
            else result.measured_single_k.model_dump(mode="json")
        ),
        "acceptance": {
            "moves": check.moves,
            "finding": check.finding,
            "moved": [shift.model_dump(mode="json") for shift in check.moved],
        },
        "step_cost": {
            "smooth": None if costs.cross is None else costs.cross.equation(),
            "plain": None if costs.plain is None else costs.plain.equation(),
        },
        "warnings": list(result.warnings),
        "assumptions": list(result.assumptions),
    }
