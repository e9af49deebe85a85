"""Which k to launch next, given the runs so far and a launch budget.

A live ``tune NAME`` is a loop around this plan (facts → plan → apply):

    plan = TunePlan(settings=..., budget=4, current_k=15)
    runs: list[TuneRun] = []
    while (probe := plan.next_probe(runs)) is not None:
        runs.append(launch_and_bench(probe.k))
    result = plan.recommend(runs)

The order: the current k first (the deepest acceptance curve for free, and the baseline to beat),
then a small k (anchors the step-time fit), then the model's predicted optimum, then its better
unmeasured neighbour. It stops early once the optimum and both neighbours are measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from dflashops.tune.model import TuneInputs, TuneResult, TuneSettings, analyse
from dflashops.tune.runs import K_LIMIT, TuneRun


class Probe(BaseModel):
    """One launch the plan asks for."""

    model_config = ConfigDict(frozen=True)

    k: int
    reason: str


class TunePlan(BaseModel):
    """The search: range and model settings, a launch budget and the k the server runs now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    settings: TuneSettings = TuneSettings()
    budget: int = Field(default=4, ge=2, le=K_LIMIT, description="launches, the first included")
    current_k: int | None = Field(default=None, ge=1, description="k the server runs now")

    def start_k(self) -> int:
        """The current k (clamped to the range), else the largest k."""
        wanted = self.current_k if self.current_k is not None else self.settings.k_max
        return min(max(wanted, self.settings.k_min), self.settings.k_max)

    def next_probe(self, runs: Sequence[TuneRun]) -> Probe | None:
        """The next k to launch, or None when the budget is spent or nothing is left to learn."""
        k_min, k_max = self.settings.k_min, self.settings.k_max
        measured = {run.k for run in runs}
        if not runs:
            return Probe(k=self.start_k(), reason="the current k: the deepest acceptance curve")
        if len(runs) >= self.budget or k_min == k_max:
            return None
        if len(measured) < 2:
            anchor = k_min if k_min not in measured else k_max
            return Probe(k=anchor, reason="a second k anchors the step-time fit")
        result = self.recommend(runs)
        if result.best_k not in measured:
            return Probe(k=result.best_k, reason="the predicted optimum")
        neighbours = [
            row
            for row in result.predictions
            if abs(row.k - result.best_k) == 1 and row.k not in measured
        ]
        if not neighbours:
            return None
        pick = max(neighbours, key=lambda row: (row.throughput_tok_s, -row.k))
        return Probe(k=pick.k, reason="next to the measured predicted optimum")

    def next_k(self, runs: Sequence[TuneRun]) -> int | None:
        probe = self.next_probe(runs)
        return None if probe is None else probe.k

    def recommend(self, runs: Sequence[TuneRun]) -> TuneResult:
        """The model fitted to every run so far, and its k*."""
        return analyse(TuneInputs(runs=tuple(runs), settings=self.settings))
