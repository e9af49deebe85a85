"""What ``tune --load`` searches and optimises: levels, k range, objective, load mix."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dflashops.playbook.models import Tune
from dflashops.playbook.tune_load import load_problem
from dflashops.tune.acceptance import Extrapolation
from dflashops.tune.load_runs import MAX_LEVEL
from dflashops.tune.runs import K_LIMIT
from dflashops.tune.stepcost import FitMethod

# Each k change between two levels is a threshold the engine crosses under load, the place
# vllm#49548 saw throughput collapse: a k within 1 % of the best is not worth one more threshold,
# and speculation that gains under 1 % is not worth running
DEFAULT_TOLERANCE = 0.01


class LoadSettings(BaseModel):
    """The levels, the candidate k (0, speculation off, is always a candidate) and the
    objective: aggregate output tok/s per level, or, with ``tpot_slo_ms``, the most tok/s whose
    median TPOT stays under it. ``load_mix`` weighs levels for the single k an engine without
    a schedule gets."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    levels: tuple[int, ...] = Field(min_length=1)
    k_min: int = Field(default=1, ge=1, le=K_LIMIT)
    k_max: int = Field(default=15, ge=1, le=K_LIMIT)
    tpot_slo_ms: float | None = Field(default=None, gt=0)
    load_mix: dict[int, float] | None = None
    tolerance: float = Field(
        default=DEFAULT_TOLERANCE,
        ge=0,
        lt=1,
        description="the smallest k within this fraction of a level's best wins",
    )
    extrapolation: Extrapolation = Extrapolation.GEOMETRIC
    fit: FitMethod = FitMethod.AUTO

    @model_validator(mode="after")
    def _consistent(self) -> LoadSettings:
        if self.k_min > self.k_max:
            raise ValueError(f"k_min {self.k_min} is above k_max {self.k_max}")
        if self.levels[-1] > MAX_LEVEL:
            raise ValueError(f"load: levels go up to {MAX_LEVEL}")
        problem = load_problem(self.levels, self.load_mix, self.tpot_slo_ms)
        if problem:
            raise ValueError(problem)
        return self

    @classmethod
    def from_playbook(cls, tune: Tune, **overrides: object) -> LoadSettings:
        """The playbook's ``tune`` section (``load`` required), with CLI overrides on top."""
        values: dict[str, object] = {
            "levels": tuple(tune.load or ()),
            "k_min": tune.k_min,
            "k_max": tune.k_max,
            "tpot_slo_ms": tune.tpot_slo_ms,
            "load_mix": tune.load_mix,
        }
        values.update({key: value for key, value in overrides.items() if value is not None})
        return cls.model_validate(values)

    @property
    def objective(self) -> str:
        if self.tpot_slo_ms is None:
            return "aggregate output tok/s"
        return f"aggregate output tok/s with median TPOT under {self.tpot_slo_ms:g} ms"

    def weights(self) -> dict[int, float]:
        """Each level's share of the load mix (every level alike without one), summing to 1."""
        raw = self.load_mix or dict.fromkeys(self.levels, 1.0)
        total = sum(raw.values())
        return {level: raw.get(level, 0.0) / total for level in self.levels}

    def candidates(self) -> list[int]:
        return [0, *range(self.k_min, self.k_max + 1)]

    def describe_mix(self) -> str:
        weights = self.weights()
        if self.load_mix is None:
            return "every level alike"
        return ", ".join(f"c={level}: {share:.0%}" for level, share in weights.items() if share)
