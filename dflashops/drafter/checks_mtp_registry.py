"""A config against its reference entry, for the families whose entries describe a model's own
config (MTP: the target's; draft model: the draft's), with the DFlash rules' registry check.

An entry of another family describes another kind of checkpoint: comparing its keys would only
produce noise, so that is a note instead. Standard library only.
"""

from __future__ import annotations

from dflashops.drafter.checks_registry import check_registry
from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import DrafterShape
from dflashops.drafter.family_names import Family
from dflashops.drafter.files import DrafterFiles
from dflashops.drafter.registry import RegistryEntry
from dflashops.drafter.result import Finding


def registry_findings(files: DrafterFiles, ref: RegistryEntry, family: Family) -> list[Finding]:
    if ref.family != family:
        return [
            Finding(
                "info",
                "ref",
                f"a {family} reference entry",
                f"{ref.name} ({ref.family})",
                f"The entry describes a {ref.family} drafter, not a {family} one: its keys "
                "were not compared.",
                "registry",
            )
        ]
    ctx = CheckContext(drafter=files, ref=ref)
    # no sliding drafter layers here: a "when: sliding" value is only ever a note
    check_registry(ctx, ref, DrafterShape(has_sliding=False))
    return ctx.findings
