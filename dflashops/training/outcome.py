"""What one ``drafter train`` run did: the plan, each stage's summary, the export's check, the
local copies, what happened to the server, the evaluation and the promoted playbook."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.errors import DflashopsError
from dflashops.training.evaluate import Evaluation
from dflashops.training.job import Stage
from dflashops.training.plan import TrainPlan

REPORT_FILE = "train-report.json"
PROVENANCE_FILE = "provenance.json"
METRICS_FILE = "metrics.jsonl"


class ExportCheckFailed(DflashopsError):
    """The exported drafter fails ``drafter check`` against its target (exit 4, as the check)."""

    cli_exit_code = 4

    def __init__(self, export: str, findings: list[str]) -> None:
        shown = "; ".join(findings[:4]) + (
            f"; and {len(findings) - 4} more" if len(findings) > 4 else ""
        )
        super().__init__(
            f"the drafter exported to {export} fails drafter check against its target: {shown}",
            hint="the run's files are kept; fix train.drafter in the playbook and train again "
            "under a new train.name",
        )
        self.export = export
        self.findings = findings


@dataclass(frozen=True)
class CheckOutcome:
    """``drafter check`` of the export against the target (no errors, or the run stopped)."""

    status: str  # clean | warnings
    findings: tuple[str, ...] = ()
    ref_conflicts: tuple[str, ...] = ()  # keys where it differs from the playbook's drafter.ref


@dataclass
class TrainOutcome:
    plan: TrainPlan
    out_dir: Path
    dry_run: bool = False
    ran: list[Stage] = field(default_factory=list)
    summaries: dict[Stage, dict[str, Any]] = field(default_factory=dict)
    check: CheckOutcome | None = None
    provenance: dict[str, Any] | None = None
    local_files: dict[str, str] = field(default_factory=dict)  # what -> local path
    server: list[str] = field(default_factory=list)  # what happened to the server, in order
    evaluation: Evaluation | None = None
    promoted: str | None = None
    seconds: float = 0.0

    @property
    def export(self) -> str:
        return self.plan.job.paths.export

    @property
    def metrics_file(self) -> Path | None:
        path = self.local_files.get("metrics")
        return Path(path) if path else None

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.plan.container,
            "run": self.plan.run,
            "dry_run": self.dry_run,
            "plan": self.plan.to_json(),
            "ran": list(self.ran),
            "summaries": self.summaries,
            "export": None if self.dry_run else self.export,
            "check": None
            if self.check is None
            else {
                "status": self.check.status,
                "findings": list(self.check.findings),
                "ref_conflicts": list(self.check.ref_conflicts),
            },
            "provenance": self.provenance,
            "local_files": self.local_files,
            "server": self.server,
            "evaluation": self.evaluation.to_json() if self.evaluation else None,
            "promoted": self.promoted,
            "seconds": round(self.seconds, 1),
        }

    def save(self) -> Path:
        """Write the report next to the provenance (atomically)."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / REPORT_FILE
        temporary = path.with_name(f".{path.name}.tmp")
        temporary.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")
        temporary.replace(path)
        return path
