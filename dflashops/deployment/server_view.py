"""What a container's server looks like from outside: the models ``status`` reports.

:class:`ServerStatus` is what one SSH command finds (``dflashops.launch.status`` reads it); a
member of a placement adds its :class:`GroupView`. They live in the deployment contract, below
the features, because ``status`` rows (``dflashops.proxmox.lifecycle``) carry them and ``launch``
fills them: both name the same type.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


class MemberStatus(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    rank: int
    role: str
    address: str
    running: bool | None = None  # None: unreachable
    pid: int | None = None
    listening: bool | None = None
    error: str | None = None

    def what(self) -> str:
        """``lab-ct2 (worker, rank 1, 10.0.0.12)``: how a line names this member."""
        return f"{self.name} ({self.role}, rank {self.rank}, {self.address})"


GroupHealth = Literal["serving", "starting", "stopped", "degraded"]


class GroupView(BaseModel):
    """One member's view of its placement, for ``status``: its role and the group's health."""

    model_config = ConfigDict(extra="forbid")

    playbook: str
    role: str
    rank: int
    nodes: int
    health: GroupHealth
    problem: str | None = None  # one line naming the members that are down or unreachable
    members: list[MemberStatus]


class StrayProcess(BaseModel):
    """A process an earlier server left in its process group (an engine's worker whose API
    server was killed): it holds memory, GPU memory too, until it is ended."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    rss_mb: int
    command: str


class ServerStatus(BaseModel):
    """The server in one container. ``running`` is the truth from the process table."""

    model_config = ConfigDict(extra="forbid")

    host: str
    deployed: bool
    running: bool
    pid: int | None = None
    supervisor: str | None = None  # systemd | fallback
    supervisor_pid: int | None = None
    port: int | None = None
    listening: bool = False
    endpoint: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None
    speculative_config: dict[str, Any] | None = None
    served_model_name: str | None = None
    playbook: str | None = None
    uptime_s: int | None = None
    started_at: datetime | None = None
    dflashops_version: str | None = None
    problem: str | None = None  # e.g. an unreadable manifest, or SSH failed
    placement: GroupView | None = None  # a member of a placement: its role and group health
    strays: list[StrayProcess] = []  # left by an earlier server: `launch` or `stop` ends them

    @property
    def loading(self) -> bool:
        """It runs but its port does not listen yet (a restarted server loading its model)."""
        return self.running and self.port is not None and not self.listening

    @classmethod
    def unreachable(cls, host: str, problem: str) -> ServerStatus:
        """What ``status`` shows when the container could not be asked."""
        return cls(host=host, deployed=False, running=False, problem=problem)
