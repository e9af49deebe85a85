"""What every rule returns: its findings, or why it found nothing or could not check."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Finding


@dataclass
class RuleResult:
    """``skipped`` set: the rule lacked a fact it needs (the text says which)."""

    findings: list[Finding] = field(default_factory=list)
    skipped: str = ""
    note: str = ""  # what it checked, when it found nothing


Rule = Callable[[DoctorFacts], RuleResult]


def skip(reason: str) -> RuleResult:
    return RuleResult(skipped=reason)


def ok(note: str) -> RuleResult:
    return RuleResult(note=note)


def rates(values: tuple[float, ...] | list[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"
