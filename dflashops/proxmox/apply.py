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

Both run every container at once, up to ``parallel`` (:mod:`dflashops.proxmox.fleet`), over one
:class:`~dflashops.proxmox.session.PveSession`: one API client and one listing per cluster,
one SSH connection per node and per container for the whole command. Creation is concurrent
across nodes and within a node: PVE serialises what must be (each container's config lock, the
storage's allocation lock; the client waits those out); this command keeps to itself only
what PVE would not: one download of a template per node, and vmids for ``vmid: auto`` handed
out once each (:meth:`~dflashops.proxmox.clusters.PveClusters.allocate_vmid`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.progress import Say
from dflashops.proxmox.containerplan import ContainerPlan, PlanInputs
from dflashops.proxmox.errors import ProvisionError, Replan
from dflashops.proxmox.execute import StepRunner, Target
from dflashops.proxmox.fleet import Tell, as_tell, run_each, teller
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
    """Which containers to provision (all when ``names`` is empty), and how: ``parallel``
    containers at once (None: the inventory's ``parallel``), over ``session`` when the caller
    shares one between several provisions (``up``'s pairs; else the plan opens its own)."""

    inventory: Inventory
    names: tuple[str, ...] = ()
    options: ProvisionOptions = field(default_factory=ProvisionOptions)
    parallel: int | None = None
    session: PveSession | None = None


@dataclass
class PlannedContainer:
    """One container's plan, as shown, with the facts it was made from."""

    container: Container
    entry: ContainerReport
    inputs: PlanInputs | None = None  # None: planning failed (``entry.error`` says why)
    plan: ContainerPlan | None = None
    guest: GuestPlan | None = None  # planned in a running container that answered SSH
    address: str | None = None  # where it answered


@dataclass
class ProvisionPlan:
    """Every container's plan; :func:`apply_provision` applies exactly this, over the same
    session (:meth:`close` ends its connections: a plan that is not applied)."""

    request: ProvisionRequest
    containers: list[PlannedContainer]
    session: PveSession
    owns_session: bool = True

    @property
    def facts(self) -> NodeFacts:
        return self.session.facts

    @property
    def parallel(self) -> int:
        return self.request.parallel or self.request.inventory.parallel

    def report(self) -> ProvisionReport:
        return ProvisionReport(dry_run=True, containers=[c.entry for c in self.containers])

    def close(self) -> None:
        if self.owns_session:
            self.session.close()


def provision(
    inventory: Inventory,
    names: Iterable[str] = (),
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    options: ProvisionOptions | None = None,
    parallel: int | None = None,
    tell: Tell | None = None,
    session: PveSession | None = None,
) -> ProvisionReport:
    """Plan every named container (all when none is named) and, unless ``dry_run``, apply.

    Failures and refusals do not stop the other containers; they are in the report
    (:attr:`ProvisionReport.ok`, :attr:`ProvisionReport.failures`). Progress goes to ``tell``
    (a lane per container), else to ``progress`` as ``NAME: message`` lines.
    """
    request = ProvisionRequest(
        inventory, tuple(names), options or ProvisionOptions(), parallel, session
    )
    plan = plan_provision(request, progress=progress, tell=tell)
    try:
        if dry_run:
            return plan.report()
        return apply_provision(plan, progress=progress, tell=tell)
    finally:
        plan.close()


def plan_provision(
    request: ProvisionRequest, *, progress: Progress | None = None, tell: Tell | None = None
) -> ProvisionPlan:
    """Facts -> plan for every requested container; changes nothing."""
    inventory = request.inventory
    lanes = as_tell(tell, progress)
    session = request.session or PveSession(inventory, options=request.options, progress=progress)
    plan = ProvisionPlan(request, [], session, owns_session=request.session is None)
    chosen = inventory.select(request.names)
    try:
        plan.containers = run_each(
            chosen, lambda ct: _plan_one(session, ct, lanes), parallel=plan.parallel
        )
    except BaseException:  # Ctrl-C: the connections planning opened end here
        plan.close()
        raise
    return plan


def apply_provision(
    plan: ProvisionPlan, *, progress: Progress | None = None, tell: Tell | None = None
) -> ProvisionReport:
    """Apply ``plan``, every container at once (up to its ``parallel``); a failure does not
    stop the others."""
    lanes = as_tell(tell, progress)
    report = ProvisionReport(
        dry_run=False, containers=[c.entry.model_copy(deep=True) for c in plan.containers]
    )
    session = plan.session
    session.begin_apply()

    def one(pair: tuple[PlannedContainer, ContainerReport]) -> None:
        planned, entry = pair
        name = planned.container.name
        if entry.error is None:
            try:
                _apply_one(session, planned, entry, teller(lanes, name))
            except DflashopsError as exc:
                text = exc.one_line()
                entry.error = text if text.startswith(name) else f"{name}: {text}"
            except Exception as exc:  # a bug or a library's error: this container fails only
                entry.error = f"{name}: {type(exc).__name__}: {exc}"
        lanes.done(name, entry.result_line())

    pairs = list(zip(plan.containers, report.containers, strict=True))
    run_each(pairs, one, parallel=plan.parallel)
    return report


# --------------------------------------------------------------------------- plan


def _plan_one(session: PveSession, ct: Container, tell: Tell) -> PlannedContainer:
    say = teller(tell, ct.name)
    entry = ContainerReport(
        name=ct.name,
        cluster=ct.cluster,
        node=session.inventory.pve_node_name(ct),
        vmid=ct.vmid if isinstance(ct.vmid, int) else None,
    )
    planned = PlannedContainer(ct, entry)
    try:
        say("reading it in PVE")
        planned.inputs, planned.plan = session.plan(ct, wait_locks=False, say=say)
        entry.show_plan(planned.plan)
        if session.options.guest and not planned.plan.refused:
            if planned.plan.action == "create":
                entry.guest_steps = [GUEST_AFTER_CREATE]
            else:
                _preview_guest(session, planned, say)
    except DflashopsError as exc:
        entry.error = exc.one_line()
    except Exception as exc:  # a bug or a library's error: this container fails only
        entry.error = f"{type(exc).__name__}: {exc}"
    tell.done(ct.name, entry.plan_line())
    return planned


def _preview_guest(session: PveSession, planned: PlannedContainer, say: Say) -> None:
    """The guest plan of an existing container, if it runs and answers SSH right now; the
    connection is kept for the apply.

    Best effort: what stops the preview is shown, and the guest is planned again at apply.
    """
    ct, plan, entry, inputs = planned.container, planned.plan, planned.entry, planned.inputs
    if plan is None or plan.vmid is None or inputs is None:
        return
    existing = inputs.existing
    if existing is None or not existing.running:
        entry.guest_steps = [GUEST_AFTER_START]
        return
    conn: SshConnection | None = None
    try:
        address = container_address(session, ct, plan.node, plan.vmid, timeout_s=5.0, say=say)
        say(f"reading the container over SSH ({address})")
        # one attempt, 10 s to connect: a container that does not answer is planned at apply
        conn = connect(ct, address, deadline=session.options.ssh_timeout_s, attempts=1)
        guest = _plan_guest(session, ct, plan.node, conn)
    except DflashopsError as exc:
        if conn is not None:
            conn.close()
        entry.guest_steps = [f"unknown: {exc.one_line()}"]
        return
    session.keep_container_conn(ct, conn)
    planned.guest, planned.address = guest, address
    entry.show_guest(guest)


def _plan_guest(session: PveSession, ct: Container, node: str, conn: SshConnection) -> GuestPlan:
    facts = probe_guest(conn, ct)
    host = session.host_facts(ct, node) if ct.gpus else None
    return plan_guest(ct, host, facts)


# --------------------------------------------------------------------------- apply


def _apply_one(
    session: PveSession, planned: PlannedContainer, entry: ContainerReport, say: Say
) -> None:
    """Bring PVE to the plan, then reach the container and run the steps inside it."""
    ct = planned.container
    as_planned, target = _converge(session, planned, entry, say)
    vmid = target.require_vmid()
    entry.vmid, entry.node = vmid, target.node
    options = session.options
    if as_planned and planned.address is not None:
        entry.address = planned.address  # untouched since it answered there
    else:
        session.drop_container_conn(ct)  # it may have restarted: log in afresh
        say("learning its address")
        entry.address = container_address(
            session, ct, target.node, vmid, options.address_timeout_s, say=say
        )
    if not options.guest:
        return
    conn = wait_for_login(session, ct, entry.address, say)
    # the guest plan previewed while planning still holds if PVE has not touched it since
    guest = planned.guest if as_planned and planned.guest is not None else None
    if guest is None:
        say("reading the container over SSH")
        guest = _plan_guest(session, ct, target.node, conn)
        entry.show_guest(guest)
    entry.applied += apply_guest(conn, ct, guest, say)


def _converge(
    session: PveSession, planned: PlannedContainer, entry: ContainerReport, say: Say
) -> tuple[bool, Target]:
    """Run the plan's PVE steps, planning again only when PVE moved under it.

    Returns whether the container is exactly as planned and untouched (no replan, no step ran),
    and where it is.
    """
    ct = planned.container
    if planned.inputs is None or planned.plan is None:
        raise ProvisionError("no plan to apply (internal error)")
    plan = planned.plan
    say("checking PVE still looks as planned")
    why = session.stale_reason(planned.inputs)
    touched = False
    for _round in range(session.options.max_rounds):
        if why is not None:
            say(f"{why}; planning again")
            entry.applied.append(f"replanned: {why}")
            _, plan = session.plan(ct, wait_locks=True, say=say)
            if not touched:
                entry.show_plan(plan)  # what apply works from, locks waited out
            touched = True
        if plan.refused:
            raise ProvisionError(plan.refusal())
        target = Target(plan.vmid, plan.node)
        runner = StepRunner(session, ct, target, say)
        try:
            for step in plan.steps:
                say(step.describe())
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
