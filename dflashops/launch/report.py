"""What ``launch`` did (or would do), and how it failed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dflashops.errors import ServerError
from dflashops.launch.diagnose import Cause
from dflashops.launch.plan import FileChange

LaunchAction = Literal["started", "restarted", "unchanged", "dry-run"]


class LaunchReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    container: str
    host: str
    playbook: str
    action: LaunchAction
    restart_needed: bool
    reason: str
    endpoint: str
    pid: int | None = None
    started_at: datetime | None = None
    serving_since: datetime | None = None
    ready_in_s: float | None = None
    # seconds after the start at which each readiness phase was reached
    phases: dict[str, float] = {}
    supervisor: Literal["systemd", "fallback"]
    engine_venv: list[str] = []
    engine_venv_noop: str | None = None
    files: list[FileChange] = []
    spec_changes: list[str] = []
    diffs: dict[str, str] = {}  # path -> unified diff (dry run; never for secrets)
    drafter_validation: str = "not run"
    drafter_findings: list[str] = []
    forced: bool = False
    warnings: list[str] = []
    # processes an earlier server left in its group (a dry run: would be ended)
    strays: list[str] = []

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: Path) -> LaunchReport:
        return cls.model_validate_json(path.read_text(encoding="utf-8"))


class LaunchFailed(ServerError):
    """The new server died or was not ready in time; the previous deployment was restored."""

    def __init__(
        self,
        message: str,
        *,
        cause: Cause | None,
        log_tail: Sequence[str],
        rolled_back: bool,
        previous_serving: bool | None,
        endpoint: str | None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, log_tail=log_tail, hint=hint)
        self.cause = cause
        self.rolled_back = rolled_back
        #: None: nothing was serving before; True/False: the previous server is back / is not
        self.previous_serving = previous_serving
        self.endpoint = endpoint


class LaunchRefused(ServerError):
    """launch stopped before changing anything (a failing drafter check, a wrong venv)."""


class LaunchInterrupted(LaunchFailed):
    """Ctrl-C before the new server served: undone as a failed start is (the previous files and
    server back), so ``deployed.json`` still says what runs."""
