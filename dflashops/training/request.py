"""``drafter train NAME`` as a typed request (what the command line asked for)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class TrainRequest(BaseModel):
    """One ``drafter train`` run: the container, its playbook and what to do after training."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    container: str = Field(min_length=1)
    playbook: str | None = Field(None, description="NAME or FILE; default: the one naming it")
    dry_run: bool = Field(False, description="print the plan; change nothing")
    evaluate: bool = Field(False, description="bench the new drafter against the one it replaces")
    promote: bool = Field(False, description="write a playbook serving the new drafter, launch it")
    out: Path | None = Field(None, description="local folder for provenance, loss curve, report")
    wait_s: float | None = Field(
        None, gt=0, description="--wait: for a container another command changes"
    )

    def out_dir(self, run: str) -> Path:
        """Where the local copies go: ``--out``, else ``./drafter-train-NAME-RUN``."""
        return self.out or Path(f"drafter-train-{self.container}-{run}")
