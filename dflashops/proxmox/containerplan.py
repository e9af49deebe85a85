"""What a container plan is: the facts it is made from, its rows and its ordered PVE steps.

:mod:`dflashops.proxmox.plan` makes one (pure), :mod:`dflashops.proxmox.execute` runs its steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from dflashops.inventory.models import Container
from dflashops.proxmox.facts import ExistingCt, HostFacts, SiteFacts
from dflashops.proxmox.identity import Resource
from dflashops.proxmox.rows import Row, row_lines

Action = Literal["create", "change", "unchanged", "refused"]


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class DownloadTemplate:
    storage: str
    template: str

    def describe(self) -> str:
        return f"download template {self.template} to {self.storage} (aplinfo)"


@dataclass(frozen=True)
class CreateCt:
    params: tuple[tuple[str, str], ...]
    vmid: int | None  # None: allocate with nextid

    def describe(self) -> str:
        where = f"vmid {self.vmid}" if self.vmid is not None else "vmid from nextid"
        return f"create container ({where})"


@dataclass(frozen=True)
class UpdateConfig:
    params: tuple[tuple[str, str], ...]
    delete: tuple[str, ...]
    digest: str

    def describe(self) -> str:
        keys = [k for k, _ in self.params] + [f"-{k}" for k in self.delete]
        return f"update config via API ({', '.join(keys)}; digest {self.digest[:10]})"


@dataclass(frozen=True)
class PctSet:
    options: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return "pct set over SSH (" + ", ".join(k for k, _ in self.options) + ")"


@dataclass(frozen=True)
class EditConf:
    """Lines added to / removed from the main section of the config file, over SSH."""

    add: tuple[str, ...]
    remove: tuple[str, ...]

    def describe(self) -> str:
        return f"edit the config file over SSH (+{len(self.add)} / -{len(self.remove)} lines)"


@dataclass(frozen=True)
class StartCt:
    def describe(self) -> str:
        return "start"


@dataclass(frozen=True)
class RebootCt:
    reason: str

    def describe(self) -> str:
        return f"restart ({self.reason})"


Step = DownloadTemplate | CreateCt | UpdateConfig | PctSet | EditConf | StartCt | RebootCt


# --------------------------------------------------------------------------- inputs and plan


@dataclass(frozen=True)
class PlanInputs:
    """Everything a container's plan depends on."""

    container: Container
    node: str  # the PVE node name
    can_set_devices: bool  # root@pam with a password: devN and bind mounts through the API
    ssh_public_key: str | None
    site: SiteFacts
    host: HostFacts | None = None  # probed over SSH when the container wants GPUs
    resources: tuple[Resource, ...] = ()
    existing: ExistingCt | None = None


@dataclass
class ContainerPlan:
    name: str
    node: str
    vmid: int | None
    action: Action
    rows: list[Row] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    host_fixes: list[str] = field(default_factory=list)
    passthrough: str = "none"

    @property
    def refused(self) -> bool:
        return self.action == "refused"

    def refusal(self) -> str:
        """One line: the container, its vmid and what is wrong."""
        vmid = f" (vmid {self.vmid})" if self.vmid is not None else ""
        text = f"{self.name}{vmid}: refused: {'; '.join(self.issues)}"
        if self.host_fixes:
            text += f" (host fix: {'; '.join(self.host_fixes)})"
        return text


def plan_lines(plan: ContainerPlan) -> list[str]:
    """The plan as text: header, rows, steps, issues, host fixes, warnings."""
    vmid = str(plan.vmid) if plan.vmid is not None else "auto"
    lines = [
        f"{plan.name}: {plan.action} (vmid {vmid}, node {plan.node}, "
        f"passthrough {plan.passthrough})",
        *row_lines(plan.rows),
    ]
    lines += [f"  step: {step.describe()}" for step in plan.steps]
    lines += [f"  issue: {issue}" for issue in plan.issues]
    lines += [f"  host fix: {fix}" for fix in plan.host_fixes]
    lines += [f"  warning: {warning}" for warning in plan.warnings]
    return lines
