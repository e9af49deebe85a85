"""The drafter judgement a launch rests on: the check's verdict, and whether ``--force`` carries
it over errors. Made once per launch (``up`` makes it in its drafter step and hands it on), so
the refusal and the "--force over N errors" warning have one text wherever a server starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from dflashops.launch.args import TargetFacts
from dflashops.launch.report import LaunchRefused
from dflashops.launch.validation import DrafterValidation, validate
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection

REFUSAL_HINT = "fix the drafter (`dflashops drafter check`), or --force to launch anyway"


@dataclass(frozen=True)
class DrafterJudgement:
    """The check's verdict, the target facts read with it, and what launch tells the operator."""

    validation: DrafterValidation
    target: TargetFacts
    forced: bool  # --force carried the launch over errors: the host's preflight skips it too
    warnings: tuple[str, ...]

    @property
    def status(self) -> str:
        """What the manifest records: ``clean``, ``warnings``, ``errors (forced)``, ``not run``."""
        return self.validation.status + (" (forced)" if self.forced else "")


class DrafterRefused(LaunchRefused):
    """The drafter check found errors and nobody forced the launch."""

    def __init__(self, validation: DrafterValidation, hint: str = REFUSAL_HINT) -> None:
        errors = validation.lines("error")
        super().__init__(
            f"drafter check found {len(errors)} error(s): " + "; ".join(errors[:3]), hint=hint
        )
        self.validation = validation


def judge(validation: DrafterValidation, target: TargetFacts, *, force: bool) -> DrafterJudgement:
    """Refuse a failing check (:class:`DrafterRefused`) unless ``force``; otherwise the
    warnings launch must show before anything changes."""
    warnings = [f"drafter check: {line}" for line in validation.lines("warning")]
    if validation.failed:
        if not force:
            raise DrafterRefused(validation)
        errors = validation.lines("error")
        warnings.append(
            f"--force: LAUNCHING OVER {len(errors)} DRAFTER ERROR(S); the server's preflight "
            "will not validate the drafter either"
        )
        warnings += [f"drafter check: {line}" for line in errors]
    return DrafterJudgement(validation, target, validation.failed, tuple(warnings))


def judge_drafter(conn: SshConnection, playbook: Playbook, *, force: bool) -> DrafterJudgement:
    """Check the drafter the container holds (:func:`validate`) and judge it."""
    validation, target = validate(conn, playbook)
    return judge(validation, target, force=force)
