"""Carry out a :class:`~dflashops.launch.launch_plan.LaunchPlan`: the one way a server starts.

1. the placement's PVE firewall rules, the engine venvs, the members' ``/etc/hosts``;
2. nothing to restart: report "unchanged";
3. push every member's files, each member in one ``put_files`` transaction (a failure puts
   back what was pushed: the running server never stopped);
4. stop what runs (the head last: it holds the port), start the workers, then the head;
5. a placement: wait until every member's ranks joined; then readiness on the head (``/health``,
   the model listed, a 1-token completion) while every member is watched;
6. each member's manifest, with what its preflight added (``exec_env``, ``NCCL_P2P_DISABLE``).

On failure every member is stopped and gets its previous files back; a single container whose
previous server ran starts it again. :class:`~dflashops.launch.report.LaunchFailed` names the
cause (the engine's own line where its log has one) and the member.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import NoReturn

from dflashops.deployment.manifest import write_manifest
from dflashops.engine import venv as engine_venv
from dflashops.errors import DflashopsError, RemoteError
from dflashops.launch import lifecycle
from dflashops.launch.describe import member_report, plan_report
from dflashops.launch.diagnose import diagnose
from dflashops.launch.facts import read_preflight
from dflashops.launch.group import PlacementLaunchReport
from dflashops.launch.joining import GroupWatch, MemberWatch, wait_joined
from dflashops.launch.launch_plan import LaunchPlan, MemberPlan
from dflashops.launch.member_hosts import write_member_hosts
from dflashops.launch.placement import Member
from dflashops.launch.readiness import ProcessView, ReadinessResult, serve_wait
from dflashops.launch.report import LaunchFailed, LaunchReport
from dflashops.launch.rollback import PreviousServer, failure_of, restart_previous, restore
from dflashops.progress import Say, quiet
from dflashops.remote import PutResult, SshConnection, put_files

LOG_TAIL_LINES = 25


@dataclass
class _Run:
    """One member while the plan runs."""

    plan: MemberPlan
    conn: SshConnection
    pushed: list[PutResult] = field(default_factory=list)
    before: lifecycle.RunState | None = None  # just before its start: where its new log begins
    pid: int | None = None
    started_at: datetime | None = None

    @property
    def name(self) -> str:
        return self.plan.name

    def watch(self) -> MemberWatch:
        assert self.pid is not None and self.before is not None
        return MemberWatch(
            self.name,
            self.conn,
            self.plan.facts.layout,
            self.pid,
            self.before.events_size,
            self.before.log_size,
            rank=self.plan.rank,
            address=self.plan.facts.address,
        )


def apply_plan(
    plan: LaunchPlan,
    conns: Mapping[str, SshConnection],
    *,
    timeout_s: float,
    progress: Say | None = None,
    warn: Say | None = None,
) -> LaunchReport:
    """Carry out ``plan`` over the members' open connections (see the module doc)."""
    return _Apply(plan, conns, progress or quiet, warn or quiet, timeout_s).run()


class _Apply:
    def __init__(
        self,
        plan: LaunchPlan,
        conns: Mapping[str, SshConnection],
        say: Say,
        warn: Say,
        timeout_s: float,
    ) -> None:
        self.plan = plan
        self.runs = [_Run(m, conns[m.name]) for m in plan.members]
        self.say = say
        self.warn = warn
        self.timeout_s = timeout_s
        self.report = plan_report(plan, "dry-run")

    @property
    def head(self) -> _Run:
        return self.runs[0]

    def _say(self, run: _Run, message: str) -> None:
        self.say(f"{run.name}: {message}" if len(self.runs) > 1 else message)

    def _warn(self, message: str) -> None:
        self.report.warnings.append(message)
        self.warn(message)

    # ------------------------------------------------------------------ before the restart

    def run(self) -> LaunchReport:
        plan = self.plan
        self._open_firewall()
        for run in self.runs:
            self._prepare_venv(run)
        if plan.placement is not None:
            members = [Member(r.name, r.plan.rank, r.plan.facts.address, 1) for r in self.runs]
            for run in self.runs:
                # the ranks resolve each other's names (member_hosts explains); kept right even
                # when the group itself is unchanged
                if write_member_hosts(run.conn, members):
                    self._say(run, "the members' names written to /etc/hosts")
        if not plan.restart:
            return self._unchanged()
        self._push()
        self._stop_running()
        return self._start()

    def _open_firewall(self) -> None:
        if not self.plan.firewall:
            return
        lines = []
        for planned in self.plan.firewall:
            done = planned.applied()
            lines.append(f"{done.name}: {done.line}")
            if done.problem:
                self._warn(f"{done.name}: {done.line}")
            elif done.changed:
                self.say(f"{done.name}: {done.line}")
        if isinstance(self.report, PlacementLaunchReport):
            self.report.firewall = lines

    def _prepare_venv(self, run: _Run) -> None:
        facts, venv_plan = run.plan.facts, run.plan.venv_plan
        if facts.venv is None or facts.venv_wanted is None:
            return  # a restart keeps the deployed venv
        venv_facts = facts.venv
        if not venv_plan.empty:
            kinds = ", ".join(a.kind for a in venv_plan.actions)
            self._say(run, f"preparing the engine venv: {kinds}")
            engine_venv.apply(run.conn, facts.venv_wanted, venv_plan, venv_facts)
            venv_facts = engine_venv.probe(run.conn, facts.venv_wanted)
        engine_venv.check_ready(venv_facts, facts.venv_wanted)

    def _unchanged(self) -> LaunchReport:
        head = self.head.plan.facts
        report = self.report
        report.action = "unchanged"
        report.pid = head.state.server_pid
        running_since = head.manifest.started_at if head.manifest else None
        if head.manifest is not None and head.manifest.pid == head.state.server_pid:
            report.serving_since = report.started_at = running_since
        if isinstance(report, PlacementLaunchReport):
            report.members = [member_report(r.plan, "unchanged") for r in self.runs]
        return report

    def _push(self) -> None:
        for run in self.runs:
            uploads = run.plan.uploads
            if not uploads:
                continue
            self._say(run, f"pushing {len(uploads)} files")
            try:
                run.pushed = put_files(run.conn, uploads)
            except DflashopsError:
                self._restore_all()  # nothing was stopped: the running server keeps its files
                raise

    def _stop_running(self) -> None:
        try:
            for run in reversed(self.runs):  # the head last: it holds the port
                state = run.plan.facts.state
                if state.running:
                    self._say(run, f"stopping the running server (pid {state.server_pid})")
                    lifecycle.stop(run.conn, systemd=run.plan.systemd, layout=run.plan.facts.layout)
        except DflashopsError:
            self._restore_all()  # the old server may still run: give it its files back
            raise

    # ------------------------------------------------------------------ start and wait

    def _start(self) -> LaunchReport:
        started = time.monotonic()
        for run in self.runs:
            run.before = lifecycle.run_state(run.conn, run.plan.facts.layout)
        for run in self._start_order():
            assert run.before is not None
            role = run.plan.role
            self._say(run, "starting the server" if role == "single" else f"starting {role}")
            run.started_at = datetime.now(UTC)
            try:
                run.pid = lifecycle.start(
                    run.conn, run.before, systemd=run.plan.systemd, layout=run.plan.facts.layout
                )
            except DflashopsError as exc:
                self._fail(run, f"did not start: {exc.message}", exited=True)
        joined = self._wait_joined()
        remaining = max(self.timeout_s - (time.monotonic() - started), 1.0)
        result = self._wait_ready(remaining)
        ready_in = round(time.monotonic() - started, 1)
        for run in self.runs:
            self._record(run, ready_in)
        return self._started(result, ready_in, joined)

    def _start_order(self) -> list[_Run]:
        """Workers first (their rendezvous clients wait for the head), the head last."""
        return [*self.runs[1:], self.runs[0]]

    def _wait_joined(self) -> dict[str, float]:
        placement = self.plan.placement
        if placement is None:
            return {}
        joined, failure = wait_joined(
            [run.watch() for run in self.runs],
            world=placement.world_size,
            deadline_s=min(placement.join_timeout_s, self.timeout_s),
            say=self.say,
        )
        if failure is not None:
            culprit = next(r for r in self.runs if r.name == failure.name)
            self._fail(culprit, failure.what, exited=failure.exited)
        return joined

    def _wait_ready(self, timeout_s: float) -> ReadinessResult:
        head = self.head
        group = GroupWatch([run.watch() for run in self.runs]) if len(self.runs) > 1 else None
        watch: Callable[[], ProcessView] = group or lifecycle.Watcher(
            head.conn,
            head.plan.facts.layout,
            head.pid or 0,
            head.before.events_size if head.before else 0,
            head.before.log_size if head.before else 0,
        )
        try:
            result = serve_wait(
                watch,
                self.plan.endpoint,
                self.plan.served_name,
                self.plan.api_key,
                timeout_s=timeout_s,
                progress=self.say,
            )
        except DflashopsError as exc:  # a lost connection: never leave a server half-started
            self._fail(head, f"could not be watched: {exc.message}", exited=False)
        if result.ready:
            return result
        if group is not None and group.dead is not None:
            culprit = next(r for r in self.runs if r.name == group.dead.name)
            self._fail(culprit, f"exited (code {group.dead_code})", exited=True)
        message, code = failure_of(result, timeout_s)
        self._fail(head, message, exited=code is not None, exit_code=code)
        return result  # not reached: _fail raises

    # ------------------------------------------------------------------ after it serves

    def _record(self, run: _Run, ready_in_s: float) -> None:
        exec_env, p2p = read_preflight(run.conn, run.plan.facts.layout.preflight_report)
        manifest = run.plan.manifest.model_copy(
            update={
                "pid": run.pid,
                "started_at": run.started_at,
                "ready_in_s": ready_in_s,
                "exec_env": exec_env,
                "nccl_p2p_disable": p2p,
            }
        )
        write_manifest(run.conn, manifest, run.plan.facts.layout)

    def _started(
        self, result: ReadinessResult, ready_in: float, joined: dict[str, float]
    ) -> LaunchReport:
        report, head = self.report, self.head
        report.action = (
            "restarted" if any(r.plan.facts.state.running for r in self.runs) else ("started")
        )
        report.pid = head.pid
        report.started_at = report.serving_since = head.started_at
        report.ready_in_s = ready_in
        first = max(joined.values(), default=0.0)
        report.phases = {"joined": round(first, 1)} if joined else {}
        report.phases.update({str(k): round(v + first, 1) for k, v in result.reached.items()})
        if isinstance(report, PlacementLaunchReport):
            report.members = []
            for run in self.runs:
                row = member_report(run.plan, report.action, pid=run.pid)
                row.joined_in_s = joined.get(run.name)
                report.members.append(row)
        return report

    # ------------------------------------------------------------------ failure

    def _restore_all(self) -> None:
        for run in self.runs:
            try:
                restore(run.conn, run.pushed)
            except DflashopsError as exc:
                self._warn(f"{run.name}: the previous files could not be put back: {exc.message}")

    def _fail(
        self, culprit: _Run, message: str, *, exited: bool, exit_code: int | None = None
    ) -> NoReturn:
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
        # would be "explained" by whatever warning its log happens to hold
        single = len(self.runs) == 1
        cause = diagnose(text, exit_code) if exited or single else None
        self.say("failed; stopping it and restoring the previous files")
        for run in self.runs:
            try:
                lifecycle.stop(run.conn, systemd=run.plan.systemd, layout=run.plan.facts.layout)
            except DflashopsError as exc:
                self._warn(f"{run.name}: could not be stopped: {exc.message}")
        self._restore_all()
        previous = None
        head = self.head
        if single and head.plan.facts.state.running and any(r.changed for r in head.pushed):
            # the files that served before are back: start them again (unchanged files would
            # only fail the same way)
            self.say("starting the previous server again")
            previous = restart_previous(
                head.conn,
                head.plan.facts,
                systemd=head.plan.systemd,
                api_key=self.plan.api_key,
                timeout_s=self.timeout_s,
                say=self.say,
            )
        hint = cause.hint if cause else None
        if single:
            what = f"{cause.summary if cause else message} ({message}); {self._outcome(previous)}"
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
        before = self.head.plan.facts.manifest
        raise LaunchFailed(
            what,
            cause=cause,
            log_tail=lifecycle.tail_of(text, LOG_TAIL_LINES),
            rolled_back=True,
            previous_serving=previous.serving if previous else None,
            endpoint=before.endpoint if previous and previous.serving and before else None,
            hint=hint,
        )

    def _outcome(self, previous: PreviousServer | None) -> str:
        head = self.head
        if self.plan.kind == "restart":
            return "the server is stopped"
        if previous is not None:
            before = head.plan.facts.manifest
            return previous.outcome(before.endpoint if before else None)
        if any(r.backup for r in head.pushed):
            return "the previous files were restored (nothing was serving before)"
        return "nothing was deployed before; the new files were removed"
