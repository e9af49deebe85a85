"""The drafter check of the method the server runs, on the files as they are now.

``launch`` checked the playbook's drafter when it started the server; the files may have
changed since (pushed, copied over, retrained), and a server started with ``--force`` runs over
errors. ``doctor`` runs the same check again (:func:`dflashops.launch.validation.validate`: the
rules of the method's family, so an EAGLE-3, MTP, draft-model, DSpark or n-gram server is judged
by its own rules, not DFlash's) and reports what it finds: an error is critical (the engine
refuses, crashes or acceptance collapses), a warning a warning.
"""

from __future__ import annotations

from dflashops.doctor.facts import DoctorFacts
from dflashops.doctor.findings import Finding
from dflashops.doctor.rules import RuleResult, ok, skip

# the most check findings a doctor finding lists as evidence (the command shows them all)
MAX_SHOWN = 8


def drafter_check(facts: DoctorFacts) -> RuleResult:
    """Errors and warnings of the method's drafter check → one finding with each of them."""
    if facts.drafter_check is None:
        return skip(facts.drafter_check_note or "the playbook's drafter was not checked")
    checked, method = facts.drafter_check.validation, facts.drafter_check.method
    if checked.status == "not run":
        return skip(checked.reason or "no drafter check for this method")
    serious = [f for f in checked.findings if f.severity in ("error", "warning")]
    if not serious:
        return ok(f"the {method} drafter check is clean ({len(checked.findings)} notes)")
    errors = [f for f in serious if f.severity == "error"]
    ordered = [*errors, *(f for f in serious if f.severity == "warning")]
    evidence = tuple(
        f"{f.severity}: {f.key}: expected {f.expected}, found {f.found}" for f in ordered
    )
    if len(evidence) > MAX_SHOWN:
        evidence = (*evidence[:MAX_SHOWN], f"… and {len(evidence) - MAX_SHOWN} more")
    counts = f"{len(errors)} error(s), {len(serious) - len(errors)} warning(s)"
    return RuleResult(
        [
            Finding(
                rule="drafter-check",
                severity="critical" if errors else "warning",
                title=f"the {method} drafter check finds {counts} in the files served now",
                evidence=evidence,
                fix=f"`{facts.drafter_check.command}` shows every finding and why",
                impact=None,
                details={
                    "method": method,
                    "status": checked.status,
                    "findings": [
                        {
                            "severity": f.severity,
                            "key": f.key,
                            "expected": f.expected,
                            "found": f.found,
                            "why": f.why,
                        }
                        for f in ordered
                    ],
                },
            )
        ]
    )
