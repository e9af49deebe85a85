"""The :class:`LaunchPlan`: everything a launch will do, decided before it changes anything.

Every way a server starts builds one — a single container, a placement's members, ``restart``,
the training server, ``up`` — and :func:`dflashops.launch.apply.apply_plan` carries it out;
``--dry-run`` builds it and prints it. Pure: the facts (:mod:`dflashops.launch.facts`), the
drafter judgement (:mod:`dflashops.launch.judge`) and the playbook go in, the plan comes out, so
the same playbook gives the same manifest wherever it runs (tests/unit/test_launch_core.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from dflashops.deployment.manifest import DeployedFile, DeployedManifest
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import LocalWheel
from dflashops.launch.args import speculative_config
from dflashops.launch.facts import HostFacts
from dflashops.launch.firewall import PortsPlan
from dflashops.launch.judge import DrafterJudgement
from dflashops.launch.members import render_member
from dflashops.launch.placement import Member
from dflashops.launch.plan import Decision, FileChange, decide, file_changes
from dflashops.launch.render import Rendered, RenderInputs, render, venv_python
from dflashops.playbook.models import Playbook
from dflashops.playbook.placement import Placement
from dflashops.remote import FileUpload

Role = Literal["single", "head", "worker"]
NO_VENV_WORK = engine_venv.VenvPlan((), "not looked at: the deployed engine venv is kept")


@dataclass(frozen=True)
class MemberPlan:
    """What happens in one container: the files pushed, the venv work, the manifest written."""

    facts: HostFacts
    rank: int
    role: Role
    rendered: Rendered | None  # None: a restart keeps the deployed files
    changes: tuple[FileChange, ...]
    venv_plan: engine_venv.VenvPlan
    decision: Decision
    # written once the server serves; apply fills in the pid, the times and the preflight's facts
    manifest: DeployedManifest

    @property
    def rebuild(self) -> bool:
        """Its ``deployed.json`` is unreadable: kept aside and written anew."""
        return self.facts.manifest_problem is not None

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def systemd(self) -> bool:
        return self.manifest.supervisor == "systemd"

    @property
    def uploads(self) -> list[FileUpload]:
        files = self.rendered.files if self.rendered is not None else ()
        return [FileUpload(f.path, f.content, f.mode) for f in files]

    @property
    def files_changed(self) -> int:
        return sum(1 for c in self.changes if c.action != "same")


@dataclass(frozen=True)
class LaunchPlan:
    """One launch, decided: the head (or the one container) first."""

    kind: Literal["launch", "restart"]
    playbook: str
    served_name: str
    endpoint: str
    api_key: str | None
    members: tuple[MemberPlan, ...]
    restart: bool
    reason: str
    # None: a restart (the deployed server's own check stands)
    judgement: DrafterJudgement | None
    placement: Placement | None = None
    model_copies: str = ""  # a placement: the members' copies of the model compared
    firewall: tuple[PortsPlan, ...] = ()  # a placement: each member's PVE firewall
    warnings: tuple[str, ...] = field(default=())

    @property
    def head(self) -> MemberPlan:
        return self.members[0]

    @property
    def start_order(self) -> list[MemberPlan]:
        """Workers first (their rendezvous clients wait for the head), the head last."""
        return [*self.members[1:], self.members[0]]


def render_inputs(
    facts: HostFacts, playbook: Playbook, judgement: DrafterJudgement, api_key: str | None
) -> RenderInputs:
    layout = facts.layout
    return RenderInputs(
        supervisor=facts.supervisor,
        venv_python=venv_python(playbook, layout),
        required_env=judgement.validation.required_env,
        skip_drafter_validation=judgement.forced,
        api_key=api_key,
        target=judgement.target,
        layout=layout,
        zlab_view=judgement.validation.zlab_view,
    )


def new_manifest(
    book: Playbook,
    container: str,
    *,
    rendered: Rendered,
    judgement: DrafterJudgement,
    wheel: LocalWheel,
    endpoint: str,
) -> DeployedManifest:
    """The manifest a launch writes for ``container`` once it serves (``book``: the playbook as
    this container runs it); the pid, start time and preflight facts come when it started."""
    return DeployedManifest(
        playbook=book.name,
        container=container,
        engine=book.engine.name,
        engine_version=book.engine.version,
        dflashops_version=wheel.version,
        dflashops_wheel_sha256=wheel.sha256,
        supervisor=rendered.supervisor,
        files=[DeployedFile(path=f.path, sha256=f.sha256, mode=f.mode) for f in rendered.files],
        spec=rendered.spec.to_dict(),
        speculative_config=speculative_config(book),
        method=book.drafter.method,
        num_speculative_tokens=book.server.num_speculative_tokens,
        served_model_name=book.served_name,
        host=book.server.host,
        port=book.server.port,
        endpoint=endpoint,
        api_key_env=book.server.api_key_env,
        pid=None,
        deployed_at=datetime.now(UTC),
        started_at=None,
        drafter_validation=judgement.status,
        forced=judgement.forced,
    )


def member_plan(
    facts: HostFacts,
    *,
    rank: int,
    role: Role,
    book: Playbook,
    rendered: Rendered,
    judgement: DrafterJudgement,
    wheel: LocalWheel,
    endpoint: str,
) -> MemberPlan:
    changes = file_changes(rendered, facts.files)
    venv_plan = NO_VENV_WORK
    if facts.venv is not None and facts.venv_wanted is not None:
        venv_plan = engine_venv.plan(facts.venv, facts.venv_wanted)
    return MemberPlan(
        facts=facts,
        rank=rank,
        role=role,
        rendered=rendered,
        changes=tuple(changes),
        venv_plan=venv_plan,
        decision=decide(
            changes, facts.state, facts.manifest, rebuild=facts.manifest_problem is not None
        ),
        manifest=new_manifest(
            book,
            facts.name,
            rendered=rendered,
            judgement=judgement,
            wheel=wheel,
            endpoint=endpoint,
        ),
    )


def plan_single(
    facts: HostFacts,
    playbook: Playbook,
    judgement: DrafterJudgement,
    *,
    api_key: str | None,
    endpoint: str,
    wheel: LocalWheel,
    warnings: tuple[str, ...] = (),
) -> LaunchPlan:
    """One container serves the playbook."""
    rendered = render(playbook, render_inputs(facts, playbook, judgement, api_key))
    member = member_plan(
        facts,
        rank=0,
        role="single",
        book=playbook,
        rendered=rendered,
        judgement=judgement,
        wheel=wheel,
        endpoint=endpoint,
    )
    return LaunchPlan(
        kind="launch",
        playbook=playbook.name,
        served_name=playbook.served_name,
        endpoint=endpoint,
        api_key=api_key,
        members=(member,),
        restart=member.decision.restart,
        reason=member.decision.reason,
        judgement=judgement,
        warnings=(*judgement.warnings, *warnings),
    )


def plan_group(
    facts: list[HostFacts],
    members: list[Member],
    playbook: Playbook,
    judgement: DrafterJudgement,
    *,
    api_key: str | None,
    endpoint: str,
    wheel: LocalWheel,
    model_copies: str = "",
    firewall: tuple[PortsPlan, ...] = (),
    warnings: tuple[str, ...] = (),
) -> LaunchPlan:
    """A placement's members serve the playbook together (``facts`` in ``members``' order)."""
    plans = []
    for member, host in zip(members, facts, strict=True):
        inputs = render_inputs(host, playbook, judgement, api_key)
        rendered = render_member(playbook, members, member, inputs)
        plans.append(
            member_plan(
                host,
                rank=member.rank,
                role=member.role,
                book=rendered.playbook,
                rendered=rendered.rendered,
                judgement=judgement,
                wheel=wheel,
                endpoint=endpoint,
            )
        )
    # one rank cannot be swapped alone: any member's change, or any member down, restarts all
    restart = any(m.decision.restart for m in plans)
    reason = "; ".join(f"{m.name}: {m.decision.reason}" for m in plans if m.decision.restart)
    return LaunchPlan(
        kind="launch",
        playbook=playbook.name,
        served_name=playbook.served_name,
        endpoint=endpoint,
        api_key=api_key,
        members=tuple(plans),
        restart=restart,
        reason=reason or "every member runs what is rendered",
        judgement=judgement,
        placement=playbook.placement,
        model_copies=model_copies,
        firewall=firewall,
        warnings=(*judgement.warnings, *warnings),
    )


def plan_restart(facts: HostFacts, manifest: DeployedManifest, api_key: str | None) -> LaunchPlan:
    """The deployed files, started again (``restart``, the training server)."""
    reason = "restart asked" + (" (running)" if facts.state.running else " (not running)")
    member = MemberPlan(
        facts=facts,
        rank=0,
        role="single",
        rendered=None,
        changes=(),
        venv_plan=NO_VENV_WORK,
        decision=Decision(True, reason),
        manifest=manifest,
    )
    return LaunchPlan(
        kind="restart",
        playbook=manifest.playbook,
        served_name=manifest.served_model_name,
        endpoint=manifest.endpoint,
        api_key=api_key,
        members=(member,),
        restart=True,
        reason=reason,
        judgement=None,
    )
