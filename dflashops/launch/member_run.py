"""One container while a launch plan runs: its connection, what was pushed to it, where its new
log begins, and the server it started."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from dflashops.launch import lifecycle
from dflashops.launch.joining import MemberWatch
from dflashops.launch.launch_plan import MemberPlan
from dflashops.remote import PutResult, SshConnection


@dataclass
class MemberRun:
    plan: MemberPlan
    conn: SshConnection
    pushed: list[PutResult] = field(default_factory=list)
    before: lifecycle.RunState | None = None  # just before its start: where its new log begins
    pid: int | None = None
    started_at: datetime | None = None

    @property
    def name(self) -> str:
        return self.plan.name

    def watch(self) -> MemberWatch:
        assert self.pid is not None and self.before is not None
        return MemberWatch(
            self.name,
            self.conn,
            self.plan.facts.layout,
            self.pid,
            self.before.events_size,
            self.before.log_size,
            rank=self.plan.rank,
            address=self.plan.facts.address,
        )
