"""``launch`` for a playbook with a ``placement``: one model across several containers on vLLM's
native multi-node runtime (``stop`` and ``status`` of the group: :mod:`dflashops.launch.group`).

Steps (facts → plan → apply), each per member with the single-container building blocks:

1. facts: every member's run state, manifest, engine venv and drafter/target files (the same
   model path and venv must exist on every member), the placement checked against the inventory;
2. plan: each member's files (:mod:`dflashops.launch.members`); ``dry_run`` stops here; nothing
   changed on any member and all running → "unchanged";
3. apply: stop the whole group (a rank cannot be swapped alone), push every member's files,
   start the workers (``--headless``), then the head;
4. join: wait until every member's log has vLLM's own line for each of its ranks,
   ``rank R in world size W is assigned as DP rank …`` (``initialize_model_parallel`` in
   ``vllm/distributed/parallel_state.py``, logged after the rank's process groups formed, which
   needs every rank of the world), within ``placement.join_timeout_s``; a member that exits or
   never logs its ranks is named;
5. readiness on the head as today (``/health``, the model listed, a 1-token completion), while
   every member is watched: a member that dies fails the launch, by name.

On failure every member is stopped and gets its previous files back (nothing of the group is
left half-running), and :class:`~dflashops.launch.report.LaunchFailed` names the member.

The module stays whole past 400 lines for the reason ``core.py`` is one module: its steps share
one launch's state (the group's facts, pushes and pids), which a split would pass around.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar, cast

from dflashops.deployment.access import connect
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.manifest import (
    DeployedFile,
    DeployedManifest,
    read_manifest,
    write_manifest,
)
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import LocalWheel, local_wheel
from dflashops.errors import DflashopsError, RemoteError
from dflashops.inventory.load import Inventory
from dflashops.launch import lifecycle
from dflashops.launch.args import speculative_config
from dflashops.launch.diagnose import diagnose
from dflashops.launch.endpoint import base_url, endpoint_host
from dflashops.launch.firewall import MemberFirewall, open_member_ports
from dflashops.launch.group import MemberReport, PlacementLaunchReport
from dflashops.launch.joining import GroupWatch, MemberWatch, dead, joined_ranks, member_ranks
from dflashops.launch.member_hosts import write_member_hosts
from dflashops.launch.members import MemberRender, render_member
from dflashops.launch.model_copies import SUMS_DEADLINE_S, compare_copies, parse_sums, sums_script
from dflashops.launch.placement import Member, resolve_members
from dflashops.launch.plan import decide, file_changes, remote_shas
from dflashops.launch.readiness import HttpProber, wait_ready
from dflashops.launch.render import RenderInputs, venv_python
from dflashops.launch.report import LaunchFailed, LaunchRefused, LaunchReport
from dflashops.launch.rollback import restore
from dflashops.launch.validation import validate
from dflashops.playbook.models import Playbook
from dflashops.progress import Say, quiet
from dflashops.remote import FileUpload, PutResult, SshConnection, put_files

LOG_TAIL_LINES = 25
JOIN_POLL_S = 1.0


@dataclass
class _Member:
    """One member during a launch: its connection, facts and rendered files."""

    member: Member
    conn: SshConnection
    state: lifecycle.RunState
    manifest: DeployedManifest | None
    wanted: engine_venv.VenvWanted
    venv_facts: Any
    venv_plan: Any
    plan: MemberRender
    restart: bool
    reason: str
    validation: str
    changes: list[Any]
    pushed: list[PutResult] = field(default_factory=list)
    before: lifecycle.RunState | None = None
    pid: int | None = None
    started_at: datetime | None = None
    joined_in_s: float | None = None

    @property
    def name(self) -> str:
        return self.member.name

    @property
    def systemd(self) -> bool:
        return self.plan.rendered.supervisor == "systemd"

    def watch(self, layout: Layout) -> MemberWatch:
        assert self.pid is not None and self.before is not None
        before = self.before
        return MemberWatch(
            self.name, self.conn, layout, self.pid, before.events_size, before.log_size
        )


LaunchFn = TypeVar("LaunchFn", bound=Callable[..., LaunchReport])


def placement_aware(single: LaunchFn) -> LaunchFn:
    """Route a playbook with a ``placement`` to :func:`launch_placement` (same arguments), the
    others to the single-container ``single``."""

    @functools.wraps(single)
    def launch(
        inventory: Inventory, container_name: str, playbook: Playbook, **options: Any
    ) -> LaunchReport:
        if playbook.placement is not None:
            return launch_placement(inventory, container_name, playbook, **options)
        return single(inventory, container_name, playbook, **options)

    return cast(LaunchFn, launch)


def launch_placement(
    inventory: Inventory,
    container_name: str,
    playbook: Playbook,
    *,
    dry_run: bool = False,
    force: bool = False,
    progress: Say | None = None,
    warn: Say | None = None,
    timeout_s: float = 900.0,
    environ: Mapping[str, str] | None = None,
    wheel: LocalWheel | None = None,
    layout: Layout = DEFAULT_LAYOUT,
) -> PlacementLaunchReport:
    """Deploy ``playbook`` across its placement's members and wait until the head serves."""
    say = progress or quiet
    placement = playbook.placement
    assert placement is not None
    members = resolve_members(inventory, playbook)
    head = members[0]
    if container_name != head.name:
        raise LaunchRefused(
            f"{container_name} is not the head of placement {placement.members}",
            hint=f"launch the head: dflashops launch {head.name}",
        )
    api_key = server_api_key(
        playbook.server.api_key_env,
        os.environ if environ is None else environ,
        whose=f"playbook {playbook.name}",
    )
    host = endpoint_host(playbook, head.address)
    say("building dflashops' wheel")
    wheel = wheel or local_wheel()
    with ExitStack() as stack:
        conns, checks = {}, {}
        for member in members:
            target = connect(inventory, member.name)
            conns[member.name] = stack.enter_context(target.conn)
            checks[member.name] = target.managed

        def open_ports(apply: bool) -> list[MemberFirewall]:
            return open_member_ports(
                inventory, placement, members, checks, playbook=playbook.name, apply=apply
            )

        run = _PlacementLaunch(
            playbook=playbook,
            members=members,
            conns=conns,
            host=host,
            api_key=api_key,
            wheel=wheel,
            layout=layout,
            say=say,
            warn=warn or quiet,
            timeout_s=timeout_s,
            force=force,
            open_ports=open_ports,
        )
        return run.run(dry_run)


class _PlacementLaunch:
    def __init__(
        self,
        *,
        playbook: Playbook,
        members: list[Member],
        conns: dict[str, SshConnection],
        host: str,
        api_key: str | None,
        wheel: LocalWheel,
        layout: Layout,
        say: Say,
        warn: Say,
        timeout_s: float,
        force: bool,
        open_ports: Callable[[bool], list[MemberFirewall]],
    ) -> None:
        self.playbook = playbook
        self.open_ports = open_ports
        self.members = members
        self.conns = conns
        self.api_key = api_key
        self.wheel = wheel
        self.layout = layout
        self.say = say
        self.warn = warn
        self.timeout_s = timeout_s
        self.force = force
        self.endpoint = base_url(host, playbook.server.port) + "/v1"
        self.warnings: list[str] = []

    # ------------------------------------------------------------------ facts and plan

    def run(self, dry_run: bool) -> PlacementLaunchReport:
        group = [self._facts(member) for member in self.members]
        head = group[0]
        restart = any(m.restart for m in group) or not all(m.state.running for m in group)
        reason = "; ".join(f"{m.name}: {m.reason}" for m in group if m.restart) or (
            "every member runs what is rendered"
        )
        report = PlacementLaunchReport(
            container=head.name,
            host=head.member.address,
            playbook=self.playbook.name,
            action="dry-run",
            restart_needed=restart,
            reason=reason,
            endpoint=self.endpoint,
            supervisor=head.plan.rendered.supervisor,
            engine_venv=[
                f"{m.name}: {a.kind}: {a.detail}" for m in group for a in m.venv_plan.actions
            ],
            files=head.changes,
            warnings=self.warnings,
            members=[self._member_report(m, "dry-run") for m in group],
        )
        report.model_copies = self._check_model_copies(keep=not dry_run)
        # the members must reach each other before they start; rules are written only where a
        # member's PVE firewall is on, and (dry run) only listed
        firewall = self.open_ports(not dry_run)
        report.firewall = [f"{f.name}: {f.line}" for f in firewall]
        for f in firewall:
            if f.problem:
                self._warn(f"{f.name}: {f.line}")
            elif f.changed:
                self.say(f"{f.name}: {f.line}")
        if dry_run:
            return report
        for m in group:
            if not m.venv_plan.empty:
                self.say(f"{m.name}: preparing the engine venv")
                engine_venv.apply(m.conn, m.wanted, m.venv_plan, m.venv_facts)
                m.venv_facts = engine_venv.probe(m.conn, m.wanted)
            engine_venv.check_ready(m.venv_facts, m.wanted)
        for m in group:
            # the ranks resolve each other's names (member_hosts explains); kept right even
            # when the group itself is unchanged
            if write_member_hosts(m.conn, self.members):
                self.say(f"{m.name}: the members' names written to /etc/hosts")
        if not restart:
            report.action = "unchanged"
            report.pid = head.state.server_pid
            report.members = [self._member_report(m, "unchanged") for m in group]
            return report
        return self._deploy(report, group)

    def _facts(self, member: Member) -> _Member:
        conn, layout, book = self.conns[member.name], self.layout, self.playbook
        self.say(f"reading {member.name} ({member.address}, {member.role})")
        state = lifecycle.run_state(conn, layout)
        manifest = read_manifest(conn, layout)
        wanted = engine_venv.VenvWanted(book.engine, self.wheel, layout)
        venv_facts = engine_venv.probe(conn, wanted)
        venv_plan = engine_venv.plan(venv_facts, wanted)
        validation, target_facts = validate(conn, book)
        if validation.failed and not self.force:
            errors = validation.lines("error")
            raise LaunchRefused(
                f"{member.name}: drafter check found {len(errors)} error(s): "
                + "; ".join(errors[:3]),
                hint="fix the drafter (`dflashops drafter check`), or --force to launch anyway",
            )
        for line in validation.lines("warning"):
            self._warn(f"{member.name}: drafter check: {line}")
        inputs = RenderInputs(
            supervisor="systemd" if state.systemd else "fallback",
            venv_python=venv_python(book, layout),
            required_env=validation.required_env,
            skip_drafter_validation=validation.failed,
            api_key=self.api_key,
            target=target_facts,
            layout=layout,
        )
        plan = render_member(book, self.members, member, inputs)
        changes = file_changes(plan.rendered, remote_shas(conn, plan.rendered.paths))
        decision = decide(changes, state, manifest)
        return _Member(
            member=member,
            conn=conn,
            state=state,
            manifest=manifest,
            wanted=wanted,
            venv_facts=venv_facts,
            venv_plan=venv_plan,
            plan=plan,
            restart=decision.restart,
            reason=decision.reason,
            validation=validation.status + (" (forced)" if validation.failed else ""),
            changes=list(changes),
        )

    def _check_model_copies(self, *, keep: bool) -> str:
        """Refuse (unless ``--force``) when a member's target or drafter folder is not the
        head's: each rank loads its slice from its own container (model_copies explains).
        ``keep``: cache the sums on the members (not on a dry run, which writes nothing)."""
        book = self.playbook
        paths = [str(book.model.path)]
        if book.drafter.model is not None:
            paths.append(str(book.drafter.model.path))
        head = self.members[0].name
        mismatches = []
        for path in paths:
            sums = {}
            for member in self.members:
                self.say(f"{member.name}: checksums of {path} (read once, then cached)")
                out = self.conns[member.name].run(
                    sums_script(path, self.layout, keep=keep),
                    deadline=SUMS_DEADLINE_S,
                    display=f"checksums of {path}",
                )
                sums[member.name] = parse_sums(out.stdout)
            mismatches += compare_copies(path, head, sums)
        if mismatches:
            lines = [m.line(head) for m in mismatches]
            if not self.force:
                raise LaunchRefused(
                    lines[0] + (f" (and {len(lines) - 1} more)" if len(lines) > 1 else ""),
                    hint="give every member the same files (one shared mount, or copy the "
                    "head's folder: rsync -a --checksum), or --force to launch anyway",
                )
            for line in lines:
                self._warn(f"{line} (--force)")
            return f"{len(lines)} folder(s) differ between members (--force)"
        return f"same files on all {len(self.members)} members: {', '.join(paths)}"

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.warn(message)

    def _member_report(self, m: _Member, action: str) -> MemberReport:
        return MemberReport(
            name=m.name,
            rank=m.member.rank,
            role=m.member.role,
            address=m.member.address,
            pid=m.pid if m.pid is not None else m.state.server_pid,
            action=action,
            joined_in_s=m.joined_in_s,
            files_changed=sum(1 for c in m.changes if c.action != "same"),
        )

    # ------------------------------------------------------------------ apply

    def _deploy(self, report: PlacementLaunchReport, group: list[_Member]) -> PlacementLaunchReport:
        layout = self.layout
        # the group restarts as one: stop every member first (the head last: it holds the port)
        for m in reversed(group):
            if m.state.running:
                self.say(f"{m.name}: stopping the running server (pid {m.state.server_pid})")
                lifecycle.stop(m.conn, systemd=m.systemd, layout=layout)
        for m in group:
            self.say(f"{m.name}: pushing {len(m.plan.rendered.files)} files")
            uploads = [FileUpload(f.path, f.content, f.mode) for f in m.plan.rendered.files]
            try:
                m.pushed = put_files(m.conn, uploads)
            except DflashopsError as exc:
                self._fail(group, m, f"pushing files failed: {exc.message}")
            m.before = lifecycle.run_state(m.conn, layout)
        started = time.monotonic()
        # workers first: their TCPStore clients wait for the head's rendezvous; the head last
        for m in [*group[1:], group[0]]:
            assert m.before is not None
            self.say(f"{m.name}: starting rank {m.member.rank} ({m.member.role})")
            m.started_at = datetime.now(UTC)
            try:
                m.pid = lifecycle.start(m.conn, m.before, systemd=m.systemd, layout=layout)
            except DflashopsError as exc:
                self._fail(group, m, f"did not start: {exc.message}")
        head = group[0]
        watch = GroupWatch([m.watch(layout) for m in group])
        prober = HttpProber(
            self.endpoint.removesuffix("/v1"), self.playbook.served_name, self.api_key
        )
        try:
            self._wait_joined(group, started)
            remaining = max(self.timeout_s - (time.monotonic() - started), 1.0)
            result = wait_ready(
                watch,
                prober,
                model=self.playbook.served_name,
                timeout_s=remaining,
                progress=self.say,
            )
        except LaunchFailed:
            raise
        except DflashopsError as exc:  # a lost connection: never leave the group half-running
            self._fail(group, head, f"could not be watched: {exc.message}")
        finally:
            prober.close()
        if not result.ready:
            culprit = next((m for m in group if watch.dead and m.name == watch.dead.name), head)
            what = (
                f"exited (code {watch.dead_code})"
                if watch.dead is not None
                else f"not ready ({result.phase.value})"
            )
            self._fail(group, culprit, what, exited=watch.dead is not None)
        ready_in = round(time.monotonic() - started, 1)
        for m in group:
            self._write_manifest(m, ready_in)
        report.action = "restarted" if any(m.state.running for m in group) else "started"
        report.pid = head.pid
        report.started_at = head.started_at
        report.serving_since = head.started_at
        report.ready_in_s = ready_in
        joined = max((m.joined_in_s or 0.0) for m in group)
        report.phases = {"joined": round(joined, 1)}
        report.phases.update({str(k): round(v + joined, 1) for k, v in result.reached.items()})
        report.members = [self._member_report(m, report.action) for m in group]
        return report

    def _wait_joined(self, group: list[_Member], started: float) -> None:
        placement = self.playbook.placement
        assert placement is not None
        world = placement.world_size
        deadline = started + min(placement.join_timeout_s, self.timeout_s)
        waiting = {m.name for m in group}
        silent: set[str] = set()  # members whose last poll got no answer over SSH
        while waiting:
            for m in group:
                if m.name not in waiting:
                    continue
                view, lines = m.watch(self.layout)()
                if view is None:
                    silent.add(m.name)
                    continue
                silent.discard(m.name)
                if dead(view):
                    what = f"exited (code {view.exit_code}) before joining"
                    self._fail(group, m, what, exited=True)
                wanted = set(member_ranks(m.member.rank, world, len(group)))
                if wanted <= joined_ranks(lines, world):
                    m.joined_in_s = round(time.monotonic() - started, 1)
                    waiting.discard(m.name)
                    self.say(f"{m.name}: ranks {sorted(wanted)} of {world} joined")
            if not waiting:
                return
            if time.monotonic() > deadline:
                names = ", ".join(
                    f"{m.name} ({m.member.address}, rank {m.member.rank}"
                    + (", not answering over SSH)" if m.name in silent else ")")
                    for m in group
                    if m.name in waiting
                )
                culprit = next(m for m in group if m.name in waiting)
                self._fail(
                    group,
                    culprit,
                    f"did not join within {deadline - started:.0f}s (still waiting: {names})",
                )
            self.say(
                f"waiting for {', '.join(sorted(waiting))} to join "
                f"({time.monotonic() - started:.0f}s)"
            )
            time.sleep(JOIN_POLL_S)

    def _write_manifest(self, m: _Member, ready_in: float) -> None:
        rendered, book = m.plan.rendered, m.plan.playbook
        manifest = DeployedManifest(
            playbook=book.name,
            container=m.name,
            engine=book.engine.name,
            engine_version=book.engine.version,
            dflashops_version=self.wheel.version,
            dflashops_wheel_sha256=self.wheel.sha256,
            supervisor=rendered.supervisor,
            files=[DeployedFile(path=f.path, sha256=f.sha256, mode=f.mode) for f in rendered.files],
            spec=rendered.spec.to_dict(),
            speculative_config=speculative_config(book),
            method=book.drafter.method,
            num_speculative_tokens=book.server.num_speculative_tokens,
            served_model_name=book.served_name,
            host=book.server.host,
            port=book.server.port,
            endpoint=self.endpoint,
            api_key_env=book.server.api_key_env,
            pid=m.pid,
            deployed_at=datetime.now(UTC),
            started_at=m.started_at,
            ready_in_s=ready_in,
            drafter_validation=m.validation,
            forced=self.force,
        )
        write_manifest(m.conn, manifest, self.layout)

    # ------------------------------------------------------------------ failure

    def _fail(
        self, group: list[_Member], culprit: _Member, what: str, *, exited: bool = False
    ) -> NoReturn:
        layout = self.layout
        offset = culprit.before.log_size if culprit.before else 0
        try:
            text = lifecycle.log_since(culprit.conn, layout, offset)
        except RemoteError as exc:
            text = f"(its log could not be read: {exc.message})"
        # the engine's own error explains an exit; a member that merely has not joined (or
        # answered) would be "explained" by whatever warning its log happens to hold
        cause = diagnose(text, None) if exited else None
        self.say("failed; stopping every member and restoring their previous files")
        for m in group:
            try:
                lifecycle.stop(m.conn, systemd=m.systemd, layout=layout)
                restore(m.conn, m.pushed)
            except DflashopsError as exc:
                self._warn(f"{m.name}: could not be cleaned: {exc.message}")
        member = culprit.member
        summary = f" ({cause.summary})" if cause else ""
        raise LaunchFailed(
            f"member {member.name} ({member.role}, rank {member.rank}, {member.address}) "
            f"{what}{summary}; every member is stopped and has its previous files back",
            cause=cause,
            log_tail=lifecycle.tail_of(text, LOG_TAIL_LINES),
            rolled_back=True,
            previous_serving=None,
            endpoint=None,
            hint=(cause.hint if cause else None)
            or f"read its log: dflashops logs {member.name}; rerun launch once it is fixed",
        )
