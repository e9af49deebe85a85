"""Which k ``tune --load`` launches next, within a budget of launches.

Each launch serves one k and the bench runs it at every level, so a launch buys a column of
the (level, k) table. A live driver is a loop around this plan (facts → plan → apply):

    plan = LoadTunePlan(settings=..., budget=4, current_k=8)
    runs: list[LevelRun] = []
    while (probe := plan.next_probe(runs)) is not None:
        runs += launch_and_bench_every_level(probe.k)
    result = plan.recommend(runs)
    decision = decide(result, schedule_support(engine, version), max_num_seqs)
    if decision.needs_verification:   # the one launch past the budget
        verify = launch_and_bench_every_level(decision.schedule)
        verdict = judge_schedule(decision, runs, verify, old_k=plan.current_k, ...)

The order: the current (concurrency-1) k first: the deepest acceptance curve, and the fixed k
the schedule is compared with; then k = 0, the baseline that says where speculation stops
paying; then a second speculative k, so every level gets a step-time slope; then, while the
budget lasts, the unmeasured k the model expects to gain most over what each level measured
(weighted by the load mix), then unmeasured neighbours of the levels' k*. It stops early when
nothing unmeasured is expected to gain.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from dflashops.tune.load_model import LoadResult, analyse_load
from dflashops.tune.load_runs import LevelRun
from dflashops.tune.load_settings import LoadSettings
from dflashops.tune.runs import K_LIMIT


class LoadProbe(BaseModel):
    """One launch the plan asks for: serve ``k`` and bench every level."""

    model_config = ConfigDict(frozen=True)

    k: int
    reason: str


class LoadTunePlan(BaseModel):
    """The search over k for every level: settings, a launch budget and the current k."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    settings: LoadSettings
    budget: int = Field(
        default=4, ge=2, le=K_LIMIT, description="launches of one k each; verification apart"
    )
    current_k: int = Field(
        ge=1,
        le=K_LIMIT,
        description="the k chosen at concurrency 1; measured even outside the range, since it "
        "is what the schedule must beat",
    )

    def launched(self, runs: Sequence[LevelRun]) -> list[int]:
        """The k launched so far, in order (one launch per k)."""
        seen: list[int] = []
        for run in runs:
            if run.k not in seen:
                seen.append(run.k)
        return seen

    def next_probe(self, runs: Sequence[LevelRun]) -> LoadProbe | None:
        """The next k to launch, or None when the budget is spent or nothing is left to gain."""
        launched = self.launched(runs)
        if len(launched) >= self.budget:
            return None
        if self.current_k not in launched:
            return LoadProbe(
                k=self.current_k,
                reason="the concurrency-1 k*: the deepest acceptance curve and the fixed k the "
                "schedule must beat",
            )
        if 0 not in launched:
            return LoadProbe(k=0, reason="speculation off: where speculation stops paying")
        speculative = [k for k in launched if k > 0]
        if len(speculative) < 2:
            anchor = self._anchor(speculative[0])
            if anchor is not None:
                return LoadProbe(k=anchor, reason="a second k: a step-time slope at every level")
            return None
        return self._most_promising(self.recommend(runs), set(launched))

    def recommend(self, runs: Sequence[LevelRun]) -> LoadResult:
        return analyse_load(runs, self.settings)

    def _anchor(self, measured: int) -> int | None:
        settings = self.settings
        for k in (settings.k_min, settings.k_max):
            if k != measured:
                return k
        return None

    def _most_promising(self, result: LoadResult, launched: set[int]) -> LoadProbe | None:
        weights = self.settings.weights()
        gains: dict[int, float] = {}
        for choice in result.levels:
            measured = [row.measured_tok_s for row in choice.predictions if row.measured_tok_s]
            if not measured:
                continue
            best_measured = max(measured)
            for row in choice.predictions:
                if row.k in launched or row.k > self.settings.k_max or row.k == 0:
                    continue
                if row.k < self.settings.k_min or row.predicted_tok_s is None:
                    continue
                gain = row.predicted_tok_s / best_measured - 1.0
                # a level with no weight in the mix still counts a little: the schedule serves
                # it too, and the verdict compares it
                share = max(weights[choice.level], 1e-3)
                gains[row.k] = gains.get(row.k, 0.0) + share * max(gain, 0.0)
        unmeasured_best = {
            choice.best_k for choice in result.levels if choice.best_k not in launched
        }
        if unmeasured_best:
            k = max(unmeasured_best, key=lambda k: (gains.get(k, 0.0), -k))
            return LoadProbe(k=k, reason=f"k*={k} predicted at {self._levels_with(result, k)}")
        neighbours = {
            k
            for choice in result.levels
            if choice.best_k > 0
            for k in (choice.best_k - 1, choice.best_k + 1)
            if k not in launched and gains.get(k, 0.0) > 0
        }
        if not neighbours:
            return None
        k = max(neighbours, key=lambda k: (gains[k], -k))
        return LoadProbe(k=k, reason="next to a measured k*, predicted to gain")

    @staticmethod
    def _levels_with(result: LoadResult, k: int) -> str:
        levels = [choice.level for choice in result.levels if choice.best_k == k]
        return ", ".join(f"c={level}" for level in levels)
