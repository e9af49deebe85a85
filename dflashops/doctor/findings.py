"""A doctor finding (severity, evidence, the fixing command), the ranking, and the report."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Severity = Literal["critical", "warning", "info"]
SEVERITY_ORDER: dict[str, int] = {"critical": 0, "warning": 1, "info": 2}
CheckOutcome = Literal["found", "ok", "skipped"]


class Finding(BaseModel):
    """One thing wrong, what shows it, and what fixes it.

    ``impact`` is the rule's estimate of the share of throughput (or acceptance) it costs, in
    [0, 1]; it orders findings of one severity (None sorts last)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str = Field(description="the rule that found it, e.g. drafter-config")
    severity: Severity
    title: str
    evidence: tuple[str, ...] = Field(description="what was measured or read, one fact a line")
    fix: str = Field(description="the command (or change) that fixes it")
    impact: float | None = Field(None, ge=0, le=1)
    details: dict[str, Any] = Field(default_factory=dict, description="machine-readable facts")


class Check(BaseModel):
    """What one rule concluded: found something, found nothing, or could not check (and why)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule: str
    outcome: CheckOutcome
    note: str = ""


def rank(findings: list[Finding]) -> list[Finding]:
    """Most severe first; within a severity, the larger estimated impact first."""
    return sorted(
        findings,
        key=lambda f: (SEVERITY_ORDER[f.severity], -(f.impact if f.impact is not None else -1.0)),
    )


class DoctorReport(BaseModel):
    """The ``--json`` document: what was examined, the ranked findings, every rule's outcome."""

    model_config = ConfigDict(extra="forbid")

    container: str
    endpoint: str | None = None
    measured: dict[str, Any] = Field(default_factory=dict)
    findings: list[Finding] = Field(default_factory=list)
    checks: list[Check] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """0: nothing wrong; 1: findings (``info`` ones alone do not count as wrong)."""
        return 1 if any(f.severity != "info" for f in self.findings) else 0
