"""``up`` as one typed request (the CLI builds it; the lab demo builds its own)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from dflashops.up.lock import DEFAULT_WAIT_S
from dflashops.up.plan import check_step

# pairs a run (not a dry run) runs at once unless --parallel says: each loads a model and benches
DEFAULT_PARALLEL = 2


class UpRequest(BaseModel):
    """Which pairs, what to redo, how many at once, whether to wait for a busy pair."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    playbooks: tuple[Path, ...] = Field(min_length=1, description="playbook files")
    containers: tuple[str, ...] = Field((), description="-c: run each playbook on these instead")
    dry_run: bool = False
    from_step: str | None = Field(None, description="--from: redo from this step on")
    parallel: int | None = Field(
        None, ge=1, le=64, description="--parallel; None: the inventory's for a dry run, else 2"
    )
    fix_drafter: bool = False
    force: bool = False
    state_dir: Path
    wait: bool = Field(False, description="--wait: queue behind another run on a pair")
    wait_timeout_s: float = Field(DEFAULT_WAIT_S, gt=0, description="--wait-timeout")

    @field_validator("from_step")
    @classmethod
    def _from_is_a_step(cls, value: str | None) -> str | None:
        return check_step(value, "--from")
