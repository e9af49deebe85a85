"""Results of a family that cannot be checked: its files are missing, or it has no rules yet."""

from __future__ import annotations

from dflashops.drafter.result import CheckResult, Finding


def no_files(family: str) -> CheckResult:
    """A checkpoint family asked to check without its drafter's files."""
    return CheckResult.of(
        [
            Finding(
                "error",
                "drafter",
                f"the {family} drafter's files",
                "(none given)",
                "A checkpoint drafter is checked against its config, weights and target.",
                "family",
            )
        ],
        {},
    )


def not_checked(family: str) -> CheckResult:
    """A family dflashops knows but has no rules for yet: said, never taken for clean."""
    return CheckResult.of(
        [
            Finding(
                "info",
                "method",
                f"rules for {family}",
                "none yet",
                f"dflashops has no {family} rules yet: nothing about this drafter was checked.",
                "family",
            )
        ],
        {},
    )
