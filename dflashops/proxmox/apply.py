"""``provision``: plan every container once, show the plan, then apply that plan.

:func:`plan_provision` gathers facts and plans each container (and, for a running one, the steps
inside it); nothing changes. :func:`apply_provision` applies that plan: it first checks that PVE
still looks the way the plan saw it (:meth:`~dflashops.proxmox.session.PveSession.stale_reason`)
and plans again only when it does not (a lock seen while planning, a changed digest, containers
that appeared or went). A step that loses a race later (:class:`~dflashops.proxmox.errors.Replan`)
also ends in a new plan, from what is there now, so two provisions of one container, or a
provision racing an operator, converge on one correctly configured container.

Once PVE is right the container's address is learned, a real SSH login made (host keys
verified) and the steps inside the container run (:mod:`dflashops.proxmox.guest`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.proxmox.containerplan import ContainerPlan, PlanInputs
from dflashops.proxmox.errors import ProvisionError, Replan
from dflashops.proxmox.execute import StepRunner, Target
from dflashops.proxmox.guest import GuestPlan, apply_guest, plan_guest, probe_guest
from dflashops.proxmox.reach import connect, container_address, wait_for_login
from dflashops.proxmox.report import ContainerReport, ProvisionReport
from dflashops.proxmox.session import NodeFacts, Progress, ProvisionOptions, PveSession
from dflashops.remote import SshConnection

__all__ = [
    "PlannedContainer",
    "ProvisionError",
    "ProvisionOptions",
    "ProvisionPlan",
    "ProvisionRequest",
    "apply_provision",
    "plan_provision",
    "provision",
]

GUEST_AFTER_CREATE = "planned once the container is reachable over SSH"
GUEST_AFTER_START = "planned once the container runs"


@dataclass(frozen=True)
class ProvisionRequest:
    """Which containers to provision (all when ``names`` is empty), and how."""

    inventory: Inventory
    names: tuple[str, ...] = ()
    options: ProvisionOptions = field(default_factory=ProvisionOptions)


@dataclass
class PlannedContainer:
    """One container's plan, as shown, with the facts it was made from."""

    container: Container
    entry: ContainerReport
    inputs: PlanInputs | None = None  # None: planning failed (``entry.error`` says why)
    plan: ContainerPlan | None = None
    guest: GuestPlan | None = None  # planned in a running container that answered SSH


@dataclass
class ProvisionPlan:
    """Every container's plan; :func:`apply_provision` applies exactly this."""

    request: ProvisionRequest
    containers: list[PlannedContainer]
    facts: NodeFacts

    def report(self) -> ProvisionReport:
        return ProvisionReport(dry_run=True, containers=[c.entry for c in self.containers])


def provision(
    inventory: Inventory,
    names: Iterable[str] = (),
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    options: ProvisionOptions | None = None,
) -> ProvisionReport:
    """Plan every named container (all when none is named) and, unless ``dry_run``, apply.

    Failures and refusals do not stop the other containers; they are in the report
    (:attr:`ProvisionReport.ok`, :attr:`ProvisionReport.failures`).
    """
    request = ProvisionRequest(inventory, tuple(names), options or ProvisionOptions())
    plan = plan_provision(request, progress=progress)
    return plan.report() if dry_run else apply_provision(plan, progress=progress)


def plan_provision(request: ProvisionRequest, *, progress: Progress | None = None) -> ProvisionPlan:
    """Facts -> plan for every requested container; changes nothing."""
    facts = NodeFacts()
    inventory = request.inventory
    with PveSession(inventory, options=request.options, progress=progress, facts=facts) as session:
        planned = [_plan_one(session, ct) for ct in inventory.select(request.names)]
    return ProvisionPlan(request, planned, facts)


def apply_provision(plan: ProvisionPlan, *, progress: Progress | None = None) -> ProvisionReport:
    """Apply ``plan`` container by container; a failure does not stop the others."""
    request = plan.request
    report = ProvisionReport(
        dry_run=False, containers=[c.entry.model_copy(deep=True) for c in plan.containers]
    )
    with PveSession(
        request.inventory, options=request.options, progress=progress, facts=plan.facts
    ) as session:
        for planned, entry in zip(plan.containers, report.containers, strict=True):
            if entry.error is not None:
                continue
            try:
                _apply_one(session, planned, entry)
            except DflashopsError as exc:
                text = exc.one_line()
                name = planned.container.name
                entry.error = text if text.startswith(name) else f"{name}: {text}"
    return report


# --------------------------------------------------------------------------- plan


def _plan_one(session: PveSession, ct: Container) -> PlannedContainer:
    entry = ContainerReport(
        name=ct.name,
        cluster=ct.cluster,
        node=session.inventory.pve_node_name(ct),
        vmid=ct.vmid if isinstance(ct.vmid, int) else None,
    )
    planned = PlannedContainer(ct, entry)
    try:
        planned.inputs, planned.plan = session.plan(ct, wait_locks=False)
        entry.show_plan(planned.plan)
        if not session.options.guest or planned.plan.refused:
            return planned
        if planned.plan.action == "create":
            entry.guest_steps = [GUEST_AFTER_CREATE]
        else:
            planned.guest = _preview_guest(session, ct, planned.plan, entry)
    except DflashopsError as exc:
        entry.error = exc.one_line()
    return planned


def _preview_guest(
    session: PveSession, ct: Container, plan: ContainerPlan, entry: ContainerReport
) -> GuestPlan | None:
    """The guest plan of an existing container, if it runs and answers SSH right now.

    Best effort: what stops the preview is shown, and the guest is planned again at apply.
    """
    if plan.vmid is None:
        return None
    try:
        status = session.client(ct).ct_status(plan.node, plan.vmid).get("status")
        if status != "running":
            entry.guest_steps = [GUEST_AFTER_START]
            return None
        address = container_address(session, ct, plan.node, plan.vmid, timeout_s=5.0)
        with connect(ct, address, deadline=15.0, attempts=1) as conn:
            guest = _plan_guest(session, ct, plan.node, conn)
    except DflashopsError as exc:
        entry.guest_steps = [f"unknown: {exc.one_line()}"]
        return None
    entry.show_guest(guest)
    return guest


def _plan_guest(session: PveSession, ct: Container, node: str, conn: SshConnection) -> GuestPlan:
    facts = probe_guest(conn, ct)
    host = session.host_facts(ct, node) if ct.gpus else None
    return plan_guest(ct, host, facts)


# --------------------------------------------------------------------------- apply


def _apply_one(session: PveSession, planned: PlannedContainer, entry: ContainerReport) -> None:
    """Bring PVE to the plan, then reach the container and run the steps inside it."""
    ct = planned.container
    as_planned, target = _converge(session, planned, entry)
    vmid = target.require_vmid()
    entry.vmid, entry.node = vmid, target.node
    options = session.options
    entry.address = container_address(session, ct, target.node, vmid, options.address_timeout_s)
    if not options.guest:
        return
    with wait_for_login(session, ct, entry.address) as conn:
        # the guest plan previewed while planning still holds if PVE has not touched it since
        guest = planned.guest if as_planned and planned.guest is not None else None
        if guest is None:
            guest = _plan_guest(session, ct, target.node, conn)
            entry.show_guest(guest)
        entry.applied += apply_guest(conn, ct, guest, session.say)


def _converge(
    session: PveSession, planned: PlannedContainer, entry: ContainerReport
) -> tuple[bool, Target]:
    """Run the plan's PVE steps, planning again only when PVE moved under it.

    Returns whether the container is exactly as planned and untouched (no replan, no step ran),
    and where it is.
    """
    ct = planned.container
    if planned.inputs is None or planned.plan is None:
        raise ProvisionError("no plan to apply (internal error)")
    plan = planned.plan
    why = session.stale_reason(planned.inputs)
    touched = False
    for _round in range(session.options.max_rounds):
        if why is not None:
            session.say(f"{ct.name}: {why}; planning again")
            entry.applied.append(f"replanned: {why}")
            _, plan = session.plan(ct, wait_locks=True)
            if not touched:
                entry.show_plan(plan)  # what apply works from, locks waited out
            touched = True
        if plan.refused:
            raise ProvisionError(plan.refusal())
        target = Target(plan.vmid, plan.node)
        runner = StepRunner(session, ct, target)
        try:
            for step in plan.steps:
                session.say(f"{ct.name}: {step.describe()}")
                runner.run(step)
                entry.applied.append(step.describe())
                touched = True
        except Replan as lost:
            why = str(lost)
            continue
        return not touched, target
    raise ProvisionError(
        f"still changing after {session.options.max_rounds} rounds: "
        + "; ".join(step.describe() for step in plan.steps)
    )
