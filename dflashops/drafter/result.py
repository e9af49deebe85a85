"""The outcome of a drafter check: findings, their summary, and the environment an engine needs.

Plain frozen dataclasses (standard library only): the bundled server preflight builds and reads
them inside an engine venv. The CLI wraps them in a pydantic report
(:mod:`dflashops.drafter.report`); pydantic validates stdlib dataclasses natively, so the schema
is written once, here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["error", "warning", "info"]
Status = Literal["clean", "warnings", "errors"]

SEVERITY_RANK: Mapping[str, int] = {"error": 0, "warning": 1, "info": 2}

# The CLI exit codes: 0 clean, 3 warnings only, 4 errors (1 is any DflashopsError, raised instead).
EXIT_CODES: Mapping[str, int] = {"clean": 0, "warnings": 3, "errors": 4}


@dataclass(frozen=True)
class Finding:
    """One problem (or note) about one config key.

    ``expected`` and ``found`` are short renderings, not raw values; ``why`` says what the
    difference does to acceptance; ``check`` names the rule(s) that produced it."""

    severity: Severity
    key: str
    expected: str
    found: str
    why: str
    check: str


def engine_finding(severity: Severity, key: str, expected: str, found: str, why: str) -> Finding:
    """A finding of the engine rules (what one engine version does with the file)."""
    return Finding(
        severity=severity, key=key, expected=expected, found=found, why=why, check="engine"
    )


@dataclass(frozen=True)
class Summary:
    errors: int = 0
    warnings: int = 0
    infos: int = 0

    @property
    def status(self) -> Status:
        if self.errors:
            return "errors"
        return "warnings" if self.warnings else "clean"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.status]

    def line(self) -> str:
        """``3 errors, 1 warning, 0 notes``."""

        def plural(n: int, word: str) -> str:
            return f"{n} {word}" + ("" if n == 1 else "s")

        return ", ".join(
            (
                plural(self.errors, "error"),
                plural(self.warnings, "warning"),
                plural(self.infos, "note"),
            )
        )


@dataclass(frozen=True)
class CheckResult:
    """Findings (most severe first), their counts, and ``required_env``: variables the engine
    must be started with for this drafter to run as trained (launch sets them)."""

    findings: tuple[Finding, ...] = ()
    summary: Summary = field(default_factory=Summary)
    required_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, findings: Iterable[Finding], required_env: Mapping[str, str]) -> CheckResult:
        ordered = tuple(sorted(findings, key=lambda f: SEVERITY_RANK[f.severity]))
        counts = {s: sum(1 for f in ordered if f.severity == s) for s in SEVERITY_RANK}
        summary = Summary(errors=counts["error"], warnings=counts["warning"], infos=counts["info"])
        return cls(findings=ordered, summary=summary, required_env=dict(required_env))

    @property
    def exit_code(self) -> int:
        return self.summary.exit_code

    def keys(self, severity: Severity) -> set[str]:
        """The keys with a finding of ``severity`` (for tests and preflight messages)."""
        return {f.key for f in self.findings if f.severity == severity}


def _outranks(new: Finding, old: Finding) -> bool:
    """More severe wins; at equal severity the registry's concrete value beats a rule's."""
    a, b = SEVERITY_RANK[new.severity], SEVERITY_RANK[old.severity]
    return a < b or (a == b and new.check == "registry" and old.check != "registry")


def merge_by_key(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per key: the strongest one's expected/found, every distinct reason.

    Several rules can hit the same key (the registry says 248070, the tokenizer says the id is
    ordinary text); the user should see one row with both reasons, and the counts should count
    keys, not rules."""
    merged: dict[str, Finding] = {}
    for f in findings:
        old = merged.get(f.key)
        if old is None:
            merged[f.key] = f
            continue
        first, second = (f, old) if _outranks(f, old) else (old, f)
        why = first.why
        if second.why not in why:
            detail = [
                f"{label} {mine}"
                for label, mine, theirs in (
                    ("expected", second.expected, first.expected),
                    ("found", second.found, first.found),
                )
                if mine != theirs
            ]
            why += f" Also ({'; '.join(detail)}): " if detail else " Also: "
            why += second.why
        checks = dict.fromkeys([*first.check.split("+"), *second.check.split("+")])
        merged[f.key] = Finding(
            severity=first.severity,
            key=f.key,
            expected=first.expected,
            found=first.found,
            why=why,
            check="+".join(checks),
        )
    return list(merged.values())
