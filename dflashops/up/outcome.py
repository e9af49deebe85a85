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
    record: PairRecord | None = None

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "interrupted")

    def numbers(self) -> dict[str, Any]:
        return headline(self.record) if self.record else {}

    def line(self) -> str:
        """One line that says what happened to the pair."""
        if self.outcome == "unchanged":
            return f"{self.pair}: nothing to do: every step done with these inputs"
        if self.outcome == "failed":
            return f"{self.pair}: {self.last_step} failed: {self.error}"
        if self.outcome == "interrupted":
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
            "ran": self.ran,
            "plan": [p.to_json() for p in self.plan],
            "notes": self.notes,
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

    def pair(self, container: str) -> PairResult:
        return next(p for p in self.pairs if p.container == container)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "dry_run": self.dry_run,
            "interrupted": self.interrupted,
            "state_dir": str(self.state_dir),
            "pairs": [p.to_json() for p in self.pairs],
        }
