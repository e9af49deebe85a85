"""``launch``: facts → a :class:`~dflashops.launch.launch_plan.LaunchPlan` → ``apply_plan``.

Every way a server starts comes through here: a single container, a placement across its
members, ``restart``, the training server and ``up``. ``--dry-run`` builds the plan and returns
its report; nothing else differs between a dry run and a launch until the plan is applied.

1. facts (reading only): each container's run state, manifest, engine venv and the sha256 of
   every file a launch writes (:mod:`dflashops.launch.facts`); the drafter judgement
   (:mod:`dflashops.launch.judge`, or the one ``up`` already made); a placement's members, their
   model copies and PVE firewalls;
2. plan (pure): render, compare, decide (:mod:`dflashops.launch.launch_plan`);
3. apply: :mod:`dflashops.launch.apply` (push, stop, start, readiness, manifests; rollback on
   failure).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass

from dflashops.deployment.access import ContainerAccess, connect, server_address
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.lock import container_lock
from dflashops.deployment.manifest import DeployedManifest
from dflashops.engine.wheel import LocalWheel, local_wheel
from dflashops.errors import ServerError
from dflashops.inventory.load import Inventory
from dflashops.launch import lifecycle
from dflashops.launch.apply import apply_plan
from dflashops.launch.describe import file_diffs, plan_report
from dflashops.launch.endpoint import base_url, endpoint_host
from dflashops.launch.facts import HostFacts, read_deployed, read_host
from dflashops.launch.firewall import plan_member_ports
from dflashops.launch.judge import DrafterJudgement, judge_drafter
from dflashops.launch.launch_plan import LaunchPlan, plan_group, plan_restart, plan_single
from dflashops.launch.model_copies import compare_members
from dflashops.launch.placement import resolve_members
from dflashops.launch.readiness import deployed_wait
from dflashops.launch.report import LaunchRefused, LaunchReport
from dflashops.playbook.models import Playbook
from dflashops.progress import Say, quiet
from dflashops.remote import SshConnection

DEFAULT_READY_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class LaunchOptions:
    """How one launch runs, besides what it deploys."""

    dry_run: bool = False
    force: bool = False
    timeout_s: float = DEFAULT_READY_TIMEOUT_S
    layout: Layout = DEFAULT_LAYOUT
    wait_s: float | None = None  # for a container another command changes (None: fail at once)


def launch(
    inventory: Inventory,
    container_name: str,
    playbook: Playbook,
    *,
    dry_run: bool = False,
    force: bool = False,
    progress: Say | None = None,
    warn: Say | None = None,
    timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
    wheel: LocalWheel | None = None,
    layout: Layout = DEFAULT_LAYOUT,
    access: ContainerAccess | None = None,
    judgement: DrafterJudgement | None = None,
    wait_s: float | None = None,
) -> LaunchReport:
    """Deploy ``playbook`` to ``container_name`` (a placement: to its members, from its head)
    and wait until it serves; with ``dry_run`` only say what would change.

    ``warn`` is told each warning before anything changes (e.g. ``--force`` over drafter
    errors); the report repeats them. ``access``: an open connection to ``container_name`` the
    caller keeps (``up`` opens one per pair); ``judgement``: the drafter judgement the caller
    already made for this playbook in this container (it is not made again). Each container is
    locked for the launch (not for a dry run); ``wait_s``: how long to wait for one another
    command holds (None: fail at once, naming it)."""
    say, tell = progress or quiet, warn or quiet
    options = LaunchOptions(
        dry_run=dry_run, force=force, timeout_s=timeout_s, layout=layout, wait_s=wait_s
    )
    api_key = server_api_key(
        playbook.server.api_key_env,
        os.environ if environ is None else environ,
        whose=f"playbook {playbook.name}",
    )
    say("building dflashops' wheel")
    wheel = wheel or local_wheel()
    with ExitStack() as stack:
        locking = None if dry_run else _Locking("launch", options.wait_s, say, tell)
        hosts = _Hosts(inventory, stack, access, locking)
        planner = _Planner(hosts, playbook, api_key, wheel, options, say)
        if playbook.placement is not None:
            plan = planner.placement(container_name, judgement)
        else:
            plan = planner.container(container_name, judgement)
        for message in plan.warnings:
            tell(message)
        if dry_run:
            report = plan_report(plan)
            report.diffs = file_diffs(plan, planner.hosts.conns)
            return report
        return apply_plan(plan, planner.hosts.conns, timeout_s=timeout_s, progress=say, warn=tell)


@dataclass(frozen=True)
class _Locking:
    """Each container is locked as it is opened: by which command, how long to wait."""

    command: str
    wait_s: float | None
    say: Say
    warn: Say


class _Hosts:
    """The launch's open connections, one per container, closed (and unlocked) with the
    launch; a given ``access`` stays open for its owner."""

    def __init__(
        self,
        inventory: Inventory,
        stack: ExitStack,
        given: ContainerAccess | None,
        locking: _Locking | None,
    ):
        self.inventory = inventory
        self.stack = stack
        self.given = given
        self.locking = locking
        self.accesses: dict[str, ContainerAccess] = {}
        self.conns: dict[str, SshConnection] = {}

    def open(self, name: str) -> SshConnection:
        if name not in self.accesses:
            if self.given is not None and self.given.name == name:
                access = self.given
                self.conns[name] = access.conn
            else:
                access = connect(self.inventory, name)
                self.conns[name] = self.stack.enter_context(access)
            self.accesses[name] = access
            if self.locking is not None:  # before any fact is read: no other writer meanwhile
                lock = self.locking
                self.stack.enter_context(
                    container_lock(
                        self.conns[name],
                        name,
                        lock.command,
                        wait_s=lock.wait_s,
                        say=lock.say,
                        warn=lock.warn,
                    )
                )
        return self.conns[name]


@dataclass(frozen=True)
class _Planner:
    """Facts → plan for one playbook, on one container or across a placement's members."""

    hosts: _Hosts
    playbook: Playbook
    api_key: str | None
    wheel: LocalWheel
    options: LaunchOptions
    say: Say

    def _read(self, name: str, address: str) -> HostFacts:
        return read_host(
            self.hosts.open(name),
            name,
            address,
            playbook=self.playbook,
            wheel=self.wheel,
            layout=self.options.layout,
        )

    def _manifest(self, facts: HostFacts) -> tuple[str, ...]:
        """An unreadable ``deployed.json`` refuses the launch; ``--force`` rebuilds it (the
        warning says so)."""
        problem = facts.manifest_problem
        if problem is None:
            return ()
        if not self.options.force:
            raise LaunchRefused(
                f"{facts.name}: {problem}",
                hint=f"`dflashops launch {facts.name} --force` rebuilds it from what runs and "
                "the rendered files (the broken one is kept beside it)",
            )
        return (
            f"{facts.name}: deployed.json is unreadable ({problem}); --force rebuilds it and "
            "keeps the broken one as deployed.json.<UTC time>.broken",
        )

    def _judge(self, name: str, given: DrafterJudgement | None) -> DrafterJudgement:
        if given is not None:
            return given
        self.say("validating the drafter")
        return judge_drafter(self.hosts.open(name), self.playbook, force=self.options.force)

    def _endpoint(self, address: str) -> str:
        host = endpoint_host(self.playbook, address)
        return base_url(host, self.playbook.server.port) + "/v1"

    def container(self, name: str, judgement: DrafterJudgement | None) -> LaunchPlan:
        self.hosts.open(name)
        target = self.hosts.accesses[name]
        self.say(f"reading {name} ({target.address})")
        facts = self._read(name, target.address)
        warnings = self._manifest(facts)
        return plan_single(
            facts,
            self.playbook,
            self._judge(name, judgement),
            api_key=self.api_key,
            endpoint=self._endpoint(server_address(target.container) or target.address),
            wheel=self.wheel,
            warnings=warnings,
        )

    def placement(self, name: str, judgement: DrafterJudgement | None) -> LaunchPlan:
        book, hosts, options = self.playbook, self.hosts, self.options
        placement = book.placement
        assert placement is not None
        members = resolve_members(hosts.inventory, book)
        head = members[0]
        if name != head.name:
            raise LaunchRefused(
                f"{name} is not the head of placement {placement.members}",
                hint=f"launch the head: dflashops launch {head.name}",
            )
        facts = []
        for member in members:
            self.say(f"reading {member.name} ({member.address}, {member.role})")
            facts.append(self._read(member.name, member.address))
        rebuilt = tuple(line for host in facts for line in self._manifest(host))
        # every member loads the same files (compared next), so the head's check stands for all
        judged = self._judge(head.name, judgement)
        paths = [str(book.model.path)]
        if book.drafter.model is not None:
            paths.append(str(book.drafter.model.path))
        copies = compare_members(
            hosts.conns,
            [m.name for m in members],
            paths,
            options.layout,
            force=options.force,
            keep=not options.dry_run,
            say=self.say,
        )
        checks = {m.name: hosts.accesses[m.name].managed for m in members}
        firewall = plan_member_ports(
            hosts.inventory, placement, members, checks, playbook=book.name
        )
        return plan_group(
            facts,
            members,
            book,
            judged,
            api_key=self.api_key,
            endpoint=self._endpoint(head.address),
            wheel=self.wheel,
            model_copies=copies.line,
            firewall=firewall,
            warnings=(*rebuilt, *copies.warnings),
        )


def restart(
    access: ContainerAccess,
    manifest: DeployedManifest,
    *,
    api_key: str | None,
    progress: Say | None = None,
    timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    layout: Layout = DEFAULT_LAYOUT,
) -> LaunchReport:
    """Start the deployed files again (stopping what runs) and wait until they serve."""
    conn = access.conn
    facts = read_deployed(conn, access.name, access.address, layout)
    plan = plan_restart(facts, manifest, api_key)
    return apply_plan(plan, {access.name: conn}, timeout_s=timeout_s, progress=progress)


def await_serving(
    access: ContainerAccess,
    manifest: DeployedManifest,
    *,
    api_key: str | None,
    progress: Say | None = None,
    timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    layout: Layout = DEFAULT_LAYOUT,
) -> None:
    """Wait until the running deployed server answers a 1-token completion (it may still be
    loading); a server that exits or does not answer in time raises :class:`ServerError`."""
    state = lifecycle.run_state(access.conn, layout)
    if state.server_pid is None:
        raise ServerError(
            f"the server in {access.name} is not running",
            hint=f"start it: dflashops restart {access.name}",
        )
    # from the log's start: a loading server's last line says how far it got
    watch = lifecycle.Watcher(access.conn, layout, state.server_pid, state.events_size, 0)
    result = deployed_wait(watch, manifest, api_key, timeout_s=timeout_s, progress=progress)
    if not result.ready:
        detail = result.last.detail if result.last and result.last.detail else result.phase
        raise ServerError(
            f"the server in {access.name} does not answer ({detail})",
            hint=f"read its log: dflashops logs {access.name}",
        )
