"""What ``provision`` planned and did, per container (``--json`` prints it; ``save``/``load``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from dflashops.proxmox.containerplan import Action
from dflashops.proxmox.rows import Row

if TYPE_CHECKING:
    from dflashops.proxmox.containerplan import ContainerPlan
    from dflashops.proxmox.guest import GuestPlan


class ContainerReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    cluster: str
    node: str
    vmid: int | None = None
    action: Action | None = None  # None: the plan itself failed (see error)
    passthrough: str = "none"
    rows: list[Row] = []
    steps: list[str] = []
    guest_rows: list[Row] = []
    guest_steps: list[str] = []
    guest_plan_only: list[str] = []  # planned but not applied (nvidia_driver: skip)
    applied: list[str] = []
    address: str | None = None
    issues: list[str] = []
    host_fixes: list[str] = []
    warnings: list[str] = []
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.action != "refused"

    @property
    def has_changes(self) -> bool:
        return bool(self.steps or self.guest_steps)

    def plan_line(self) -> str:
        """The plan in one line: ``NAME: create (vmid 401, node lab, 2 steps)``."""
        if self.error is not None:
            return f"{self.name}: error: {self.error}"
        if self.action == "refused":
            return f"{self.name}: refused: {'; '.join(self.issues)}"
        # steps inside a container not reachable yet are planned later: not counted
        steps = len(self.steps) + (len(self.guest_steps) if self.guest_rows else 0)
        more = f", {steps} step{'s' if steps != 1 else ''}" if steps else ""
        return f"{self.name}: {self.action} ({self._where()}{more})"

    def result_line(self) -> str:
        """What applying did, in one line: ``NAME: created (vmid 401, node lab, 10.0.0.5)``,
        ``NAME: changed (vmid 401, node lab, 10.0.0.5, 1 step)``."""
        if self.error is not None:
            text = self.error
            if text.startswith((f"{self.name}: ", f"{self.name} (vmid ")):
                text = text.split(": ", 1)[1]  # the line names the container already
            return f"{self.name}: failed: {text}"
        done = [line for line in self.applied if not line.startswith("replanned: ")]
        verb = "created" if self.action == "create" else "changed" if done else "unchanged"
        address = f", {self.address}" if self.address else ""
        steps = f", {len(done)} step{'s' if len(done) != 1 else ''}" if verb == "changed" else ""
        return f"{self.name}: {verb} ({self._where()}{address}{steps})"

    def _where(self) -> str:
        vmid = self.vmid if self.vmid is not None else "auto"
        return f"vmid {vmid}, node {self.node}"

    def show_plan(self, plan: ContainerPlan) -> None:
        """Take the container plan's rows, steps and findings (replacing earlier ones)."""
        self.vmid = plan.vmid
        self.node = plan.node
        self.action = plan.action
        self.passthrough = plan.passthrough
        self.rows = list(plan.rows)
        self.steps = [step.describe() for step in plan.steps]
        self.issues = list(plan.issues)
        self.host_fixes = list(plan.host_fixes)
        self.warnings = list(plan.warnings)

    def show_guest(self, guest: GuestPlan) -> None:
        """Take the guest plan's rows, steps and warnings (replacing earlier guest rows)."""
        self.guest_rows = list(guest.rows)
        self.guest_steps = [step.describe() for step in guest.steps]
        self.guest_plan_only = [step.describe() for step in guest.plan_only]
        self.warnings += [w for w in guest.warnings if w not in self.warnings]


class ProvisionReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dry_run: bool
    containers: list[ContainerReport] = []

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.containers)

    @property
    def failures(self) -> list[str]:
        """One line per failed or refused container."""
        return [c.error or "; ".join(c.issues) for c in self.containers if not c.ok]

    @property
    def needs_confirmation(self) -> bool:
        """Whether applying would change something on a container that may be provisioned."""
        return any(c.has_changes for c in self.containers if c.ok)

    def container(self, name: str) -> ContainerReport:
        return next(c for c in self.containers if c.name == name)

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ProvisionReport:
        return cls.model_validate_json(path.read_text())
