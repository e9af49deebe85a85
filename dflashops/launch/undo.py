"""A failed or interrupted start, undone: every member stopped and given its previous files
back, a single container's previous server started again, and one error that says why each
of these ended as it did.

Stopping and restoring are never cut by Ctrl-C (held back until they are done); waiting for the
previous server to serve again is: the server then starts on its own, and its manifest already
names it (:func:`~dflashops.launch.rollback.start_previous`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NoReturn

from dflashops.errors import DflashopsError, RemoteError
from dflashops.launch import lifecycle
from dflashops.launch.diagnose import Cause, diagnose
from dflashops.launch.interrupts import deferred_interrupts
from dflashops.launch.launch_plan import LaunchPlan
from dflashops.launch.member_run import MemberRun
from dflashops.launch.report import LaunchFailed, LaunchInterrupted
from dflashops.launch.rollback import (
    PreviousServer,
    Restarted,
    await_previous,
    restore,
    start_previous,
)
from dflashops.progress import Say

LOG_TAIL_LINES = 25


class Undo:
    def __init__(
        self,
        plan: LaunchPlan,
        runs: Sequence[MemberRun],
        *,
        say: Say,
        warn: Say,
        timeout_s: float,
    ) -> None:
        self.plan, self.runs = plan, list(runs)
        self.say, self.warn, self.timeout_s = say, warn, timeout_s

    @property
    def single(self) -> bool:
        return len(self.runs) == 1

    def restore_all(self) -> None:
        """Put back every member's previous files (and remove the ones this launch created)."""
        for run in self.runs:
            try:
                restore(run.conn, run.pushed)
            except DflashopsError as exc:
                self.warn(f"{run.name}: the previous files could not be put back: {exc.message}")

    def fail(
        self,
        culprit: MemberRun,
        message: str,
        *,
        exited: bool,
        exit_code: int | None = None,
        interrupted: bool = False,
    ) -> NoReturn:
        """Undo the launch and raise :class:`LaunchFailed` (:class:`LaunchInterrupted` for
        Ctrl-C) naming ``culprit`` and ``message``."""
        with deferred_interrupts(self.say, "putting the previous files and server back"):
            text, cause = self._explain(culprit, exited, exit_code, interrupted)
            self.say("failed; stopping it and restoring the previous files")
            for run in self.runs:
                try:
                    lifecycle.stop(run.conn, systemd=run.plan.systemd, layout=run.plan.facts.layout)
                except DflashopsError as exc:
                    self.warn(f"{run.name}: could not be stopped: {exc.message}")
            self.restore_all()
            restarted = self._start_previous()
        previous = restarted if not isinstance(restarted, Restarted) else None
        if isinstance(restarted, Restarted):
            head = self.runs[0]
            try:
                previous = await_previous(
                    head.conn,
                    head.plan.facts,
                    restarted,
                    api_key=self.plan.api_key,
                    timeout_s=self.timeout_s,
                    say=self.say,
                )
            except KeyboardInterrupt:
                previous, interrupted = PreviousServer(None), True
        raise self._error(culprit, message, text, cause, previous=previous, interrupted=interrupted)

    def _explain(
        self, culprit: MemberRun, exited: bool, exit_code: int | None, interrupted: bool
    ) -> tuple[str, Cause | None]:
        """The culprit's log since its start, and the cause read from it."""
        layout = culprit.plan.facts.layout
        offset = culprit.before.log_size if culprit.before else 0
        try:
            text = lifecycle.log_since(culprit.conn, layout, offset)
            if exit_code is None and exited and culprit.before is not None:
                exit_code = lifecycle.exit_code_since(
                    culprit.conn, layout, culprit.before.events_size
                )
        except RemoteError as exc:
            text = f"(its log could not be read: {exc.message})"
        # one container's log explains its own failure; a member that merely has not joined
        # would be "explained" by whatever warning its log happens to hold, and an interrupt
        # by whatever the log says while loading
        explained = (exited or self.single) and not interrupted
        return text, diagnose(text, exit_code) if explained else None

    def _start_previous(self) -> Restarted | PreviousServer | None:
        """Start the server that ran before (a single container whose files this launch
        changed: unchanged files would only fail the same way); None: nothing to start."""
        head = self.runs[0]
        facts = head.plan.facts
        if not self.single or not facts.state.running or not any(r.changed for r in head.pushed):
            return None
        self.say("starting the previous server again")
        try:
            return start_previous(head.conn, facts, systemd=head.plan.systemd)
        except DflashopsError as exc:
            return PreviousServer(False, f"it did not start: {exc.message}")

    def _error(
        self,
        culprit: MemberRun,
        message: str,
        text: str,
        cause: Cause | None,
        *,
        previous: PreviousServer | None,
        interrupted: bool,
    ) -> LaunchFailed:
        hint = cause.hint if cause else None
        if self.single:
            summary = f"{cause.summary} ({message})" if cause else message
            what = f"{summary}; {self._outcome(previous)}"
            if self.plan.kind == "restart":
                what = f"restart failed: {what}"
        else:
            p = culprit.plan
            why = f" ({cause.summary})" if cause else ""
            what = (
                f"member {p.name} ({p.role}, rank {p.rank}, {p.facts.address}) {message}{why}; "
                "every member is stopped and has its previous files back"
            )
            hint = hint or f"read its log: dflashops logs {p.name}; rerun launch once it is fixed"
        before = self.runs[0].plan.facts.manifest
        error = LaunchInterrupted if interrupted else LaunchFailed
        return error(
            what,
            cause=cause,
            log_tail=lifecycle.tail_of(text, LOG_TAIL_LINES),
            rolled_back=True,
            previous_serving=previous.serving if previous else None,
            endpoint=before.endpoint if previous and previous.serving and before else None,
            hint=hint,
        )

    def _outcome(self, previous: PreviousServer | None) -> str:
        head = self.runs[0]
        if self.plan.kind == "restart":
            return "the server is stopped"
        if previous is not None:
            before = head.plan.facts.manifest
            return previous.outcome(before.endpoint if before else None)
        if any(r.backup for r in head.pushed):
            return "the previous files were restored (nothing was serving before)"
        return "nothing was deployed before; the new files were removed"
