"""What ``up`` did for each pair, and the end table's rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dflashops.up.plan import PlannedStep
from dflashops.up.record import PairRecord
from dflashops.up.summary import headline

PairOutcome = Literal["done", "unchanged", "failed", "interrupted", "stopped", "planned"]


@dataclass
class PairResult:
    pair: str
    container: str
    playbook: str
    plan: list[PlannedStep]
    outcome: PairOutcome = "planned"
    last_step: str | None = None  # the last step that ran (or would run, in a dry run)
    error: str | None = None
    ran: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # e.g. a dead run's lock taken over
    record: PairRecord | None = None
    # the pair failed on input that cannot be read as what it claims (its run record): exit 2
    invalid_input: bool = False

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "interrupted")

    @property
    def exit_code(self) -> int:
        """0 ok, 1 failed or interrupted, 2 invalid input (the CLI's exit codes)."""
        if not self.failed:
            return 0
        return 2 if self.invalid_input else 1

    def numbers(self) -> dict[str, Any]:
        return headline(self.record) if self.record else {}

    def line(self) -> str:
        """One line that says what happened to the pair."""
        if self.outcome == "unchanged":
            return f"{self.pair}: nothing to do: every step done with these inputs"
        if self.outcome == "failed":
            if self.last_step is None:  # before its first step: the lock, the record
                return f"{self.pair}: {self.error}"
            return f"{self.pair}: {self.last_step} failed: {self.error}"
        if self.outcome == "interrupted":
            if self.last_step is None:
                return f"{self.pair}: interrupted before its first step"
            return f"{self.pair}: interrupted; the next `up` continues at {self.last_step}"
        if self.outcome == "planned":
            runs = [p.step for p in self.plan if p.action == "run"]
            return f"{self.pair}: would run {', '.join(runs) or 'nothing'}"
        return f"{self.pair}: {self.outcome} after {self.last_step} (ran {', '.join(self.ran)})"

    def to_json(self) -> dict[str, Any]:
        return {
            "pair": self.pair,
            "container": self.container,
            "playbook": self.playbook,
            "outcome": self.outcome,
            "last_step": self.last_step,
            "error": self.error,
            "exit_code": self.exit_code,
            "ran": self.ran,
            "plan": [p.to_json() for p in self.plan],
            "notes": self.notes,
            "warnings": self.warnings,
            "numbers": self.numbers(),
            "line": self.line(),
            "record": self.record.model_dump(mode="json") if self.record else None,
        }


@dataclass
class UpResult:
    pairs: list[PairResult]
    state_dir: Path
    dry_run: bool = False
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not any(p.failed for p in self.pairs)

    @property
    def exit_code(self) -> int:
        """The CLI's exit code: the worst pair's (2 when a pair's run record is unreadable)."""
        return max((p.exit_code for p in self.pairs), default=0)

    def pair(self, container: str) -> PairResult:
        return next(p for p in self.pairs if p.container == container)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "dry_run": self.dry_run,
            "interrupted": self.interrupted,
            "state_dir": str(self.state_dir),
            "pairs": [p.to_json() for p in self.pairs],
        }
