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
from datetime import UTC, datetime

from dflashops.deployment.manifest import keep_broken, write_manifest
from dflashops.engine import venv as engine_venv
from dflashops.errors import DflashopsError
from dflashops.launch import lifecycle
from dflashops.launch.describe import member_report, plan_report
from dflashops.launch.facts import read_preflight
from dflashops.launch.group import PlacementLaunchReport
from dflashops.launch.interrupts import deferred_interrupts
from dflashops.launch.joining import GroupWatch, wait_joined
from dflashops.launch.launch_plan import LaunchPlan
from dflashops.launch.member_hosts import write_member_hosts
from dflashops.launch.member_run import MemberRun
from dflashops.launch.placement import Member
from dflashops.launch.readiness import ProcessView, ReadinessResult, serve_wait
from dflashops.launch.report import LaunchInterrupted, LaunchReport
from dflashops.launch.rollback import failure_of
from dflashops.launch.undo import Undo
from dflashops.progress import Say, quiet
from dflashops.remote import SshConnection, put_files

LOG_TAIL_LINES = 25


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
        self.runs = [MemberRun(m, conns[m.name]) for m in plan.members]
        self.say = say
        self.warn = warn
        self.timeout_s = timeout_s
        self.report = plan_report(plan, "dry-run")
        self.undo = Undo(plan, self.runs, say=say, warn=self._warn, timeout_s=timeout_s)
        self._fail = self.undo.fail
        self._restore_all = self.undo.restore_all

    @property
    def head(self) -> MemberRun:
        return self.runs[0]

    def _say(self, run: MemberRun, message: str) -> None:
        self.say(f"{run.name}: {message}" if len(self.runs) > 1 else message)

    def _warn(self, message: str) -> None:
        self.report.warnings.append(message)
        self.warn(message)

    # ------------------------------------------------------------------ before the restart

    def run(self) -> LaunchReport:
        plan = self.plan
        for run in self.runs:
            if run.plan.rebuild:  # --force over an unreadable deployed.json: keep it, then redo
                kept = keep_broken(run.conn, run.plan.facts.layout)
                self._say(run, f"the unreadable deployed.json is kept as {kept}")
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
            self._end_strays()  # the running server stays; what an earlier one left goes
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

    def _prepare_venv(self, run: MemberRun) -> None:
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

    def _end_strays(self) -> None:
        for run in self.runs:
            left = run.plan.facts.state.strays
            if left:
                self._say(run, f"ending {len(left)} stray engine process(es) of an earlier server")
                lifecycle.end_processes(run.conn, left)

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
        for run in self.runs:
            if run.plan.rebuild:  # what runs is what is rendered: the manifest says so again
                run.pid = run.plan.facts.state.server_pid
                self._record(run, None)
        return report

    def _push(self) -> None:
        try:
            for run in self.runs:
                uploads = run.plan.uploads
                if not uploads:
                    continue
                self._say(run, f"pushing {len(uploads)} files")
                # one member's transaction is never cut: all its files land, or none
                with deferred_interrupts(self.say, "finishing this push, then putting it back"):
                    run.pushed = put_files(run.conn, uploads)
        except DflashopsError:
            self._restore_all()  # nothing was stopped: the running server keeps its files
            raise
        except KeyboardInterrupt:
            with deferred_interrupts():
                self._restore_all()
            raise LaunchInterrupted(
                "interrupted (Ctrl-C) while pushing; the previous files are back and the "
                "server was not touched",
                cause=None,
                log_tail=[],
                rolled_back=True,
                previous_serving=None,
                endpoint=None,
            ) from None

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
        except KeyboardInterrupt:
            # the old server may be stopped already: undone as a failed start is
            self._fail(self.head, "interrupted (Ctrl-C)", exited=False, interrupted=True)

    # ------------------------------------------------------------------ start and wait

    def _start(self) -> LaunchReport:
        started = time.monotonic()
        try:
            for run in self.runs:
                run.before = lifecycle.run_state(run.conn, run.plan.facts.layout)
            for run in self._start_order():
                self._start_one(run)
            joined = self._wait_joined()
            remaining = max(self.timeout_s - (time.monotonic() - started), 1.0)
            result = self._wait_ready(remaining)
        except KeyboardInterrupt:
            # Ctrl-C before the new server served: undone as a failed start is
            self._fail(self.head, "interrupted (Ctrl-C)", exited=False, interrupted=True)
        ready_in = round(time.monotonic() - started, 1)
        # it serves: the manifests say so before anything else happens
        with deferred_interrupts(self.say, "writing deployed.json"):
            for run in self.runs:
                self._record(run, ready_in)
        return self._started(result, ready_in, joined)

    def _start_one(self, run: MemberRun) -> None:
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

    def _start_order(self) -> list[MemberRun]:
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

    def _record(self, run: MemberRun, ready_in_s: float | None) -> None:
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
