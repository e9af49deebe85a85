"""What ``provision`` planned and did, per container (``--json`` prints it; ``save``/``load``)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dflashops.proxmox.plan import Action, Row


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
    guest_plan_only: list[str] = []  # planned but not applied (the lab's fake GPUs)
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

    def container(self, name: str) -> ContainerReport:
        return next(c for c in self.containers if c.name == name)

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ProvisionReport:
        return cls.model_validate_json(path.read_text())
