"""``tune NAME`` and ``tune-offline`` as typed requests.

Which options go together is part of a request's meaning, so the models check it; a CLI turns
the first error into a usage error (``pydantic_errors.first_error_line``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dflashops.roofline.request import RooflineRequest
from dflashops.tune.model import TuneSettings
from dflashops.tune.runs import K_LIMIT, TuneRun


class _Given(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class LiveTuneRequest(_Given):
    """``tune NAME``: the container, its playbook and how to search; None takes the playbook's
    ``tune`` section."""

    container: str = Field(min_length=1)
    playbook: str | None = Field(None, description="NAME or FILE; default: the one naming it")
    k_min: int | None = Field(None, ge=1, le=K_LIMIT)
    k_max: int | None = Field(None, ge=1, le=K_LIMIT)
    budget: int | None = Field(None, ge=2, le=K_LIMIT, description="launches for the search")
    requests: int | None = Field(None, ge=1, description="per bench (concurrency 1)")
    write_playbook: bool = Field(True, description="False: only report the k line's change")
    probe_dir: Path | None = Field(None, description="each probe's bench is saved here")
    load: tuple[int, ...] | None = Field(
        None, min_length=1, description="--load: the concurrency levels (k per level)"
    )
    tpot_slo_ms: float | None = Field(None, gt=0, description="--tpot-slo-ms (with --load)")

    @model_validator(mode="after")
    def _ordered(self) -> LiveTuneRequest:
        if self.k_min is not None and self.k_max is not None and self.k_min > self.k_max:
            raise ValueError(f"--k-min {self.k_min} is above --k-max {self.k_max}")
        return self


class OfflineTuneRequest(_Given):
    """``tune-offline``: measurements given on the command line or in files, no server."""

    acceptance: tuple[float, ...] | None = Field(None, min_length=1, description="R0, R1, …")
    conditional: bool = Field(False, description="acceptance holds conditional rates")
    drafted_per_draft: float | None = Field(None, ge=0)
    draft_fraction: tuple[float, ...] | None = Field(None, min_length=1)
    runs: tuple[TuneRun, ...] = Field((), description="--step-cost and --throughput")
    sources: tuple[Path, ...] = Field((), description="--from files")
    settings: TuneSettings = TuneSettings()
    roofline: RooflineRequest = RooflineRequest()

    @model_validator(mode="after")
    def _options_fit(self) -> OfflineTuneRequest:
        if self.acceptance is None:
            describing = {
                "--conditional": self.conditional,
                "--drafted-per-draft": self.drafted_per_draft is not None,
                "--draft-fraction": self.draft_fraction is not None,
            }
            for option, given in describing.items():
                if given:
                    raise ValueError(f"{option} describes --acceptance; give --acceptance too")
            if not self.sources:
                raise ValueError("give --acceptance R0,R1,… or --from FILE")
        roofline = self.roofline
        if not roofline.names_hardware:
            stray = roofline.stray_options()
            if stray:
                raise ValueError(f"{stray[0]} is for the roofline: give --gpu or --bandwidth-gbps")
        elif roofline.weights is None:
            raise ValueError("the roofline needs --weights PATH|SIZE")
        return self
