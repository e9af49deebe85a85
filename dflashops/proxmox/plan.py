"""The container plan: wanted (inventory) vs actual (PVE), field by field, and the steps to apply.

:func:`plan_container` is pure: facts in, a :class:`~dflashops.proxmox.containerplan.ContainerPlan`
out (rows for the table, ordered steps for :mod:`dflashops.proxmox.execute`, or a refusal).
Nothing here talks to PVE or SSH. The safety rules (:mod:`dflashops.proxmox.identity`) are
checked before anything else; then :mod:`~dflashops.proxmox.plan_create` or
:mod:`~dflashops.proxmox.plan_change` fills the plan.
"""

from __future__ import annotations

from dflashops.proxmox.containerplan import ContainerPlan, PlanInputs
from dflashops.proxmox.identity import locate
from dflashops.proxmox.passthrough import plan_passthrough
from dflashops.proxmox.plan_change import plan_change
from dflashops.proxmox.plan_create import plan_create


def plan_container(inputs: PlanInputs) -> ContainerPlan:
    """The plan for one container: refused, or the rows and steps that make PVE match."""
    ct = inputs.container
    found, issues = locate(ct, inputs.resources)
    existing = inputs.existing if found is not None else None
    vmid = found.vmid if found is not None else (ct.vmid if isinstance(ct.vmid, int) else None)
    node = found.node if found is not None else inputs.node
    plan = ContainerPlan(name=ct.name, node=node, vmid=vmid, action="unchanged")
    if issues:
        plan.action = "refused"
        plan.issues = issues
        return plan
    if found is not None and found.node != inputs.node:
        plan.warnings.append(f"lives on node {found.node}, the inventory says {inputs.node}")
    if existing is not None and existing.lock:
        plan.warnings.append(f"locked ({existing.lock}): apply waits for the lock")
    if not inputs.ssh_public_key:
        plan.issues.append("ssh.key_file is not set (or its .pub is missing): no way to log in")
    pt = plan_passthrough(ct, inputs.host, can_set_devices=inputs.can_set_devices)
    plan.passthrough = pt.method
    plan.issues += list(pt.issues)
    plan.host_fixes += list(pt.host_fixes)
    plan.warnings += list(pt.notes)
    if existing is None:
        plan_create(inputs, plan, pt)
    else:
        plan_change(inputs, existing, plan, pt)
    if plan.issues:
        plan.action = "refused"
        plan.steps = []  # nothing happens to a refused container
    elif existing is None:
        plan.action = "create"
    else:
        plan.action = "change" if plan.steps else "unchanged"
    return plan
