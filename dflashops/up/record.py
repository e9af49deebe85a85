"""The run record of one (playbook, container) pair: each step's status, input digests, outputs
and times, kept as ``record.json`` in the pair's run folder under the state folder.

The state folder is ``$DFLASHOPS_UP_STATE``, else ``$XDG_STATE_HOME/dflashops/up`` (default
``~/.local/state``), next to the lab's state. A record is written after every step (atomically:
a Ctrl-C or a crash never leaves half a file), so a later ``up`` continues where this one stopped.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dflashops.errors import DflashopsError

# pending: this run will run it (a run stopped early leaves it so, and the next one runs it)
StepStatus = Literal["ok", "failed", "running", "pending"]
RECORD_FILE = "record.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9@._-]+")


class UpError(DflashopsError):
    """A step of ``up`` failed, or its state folder cannot be used."""


def up_state_root() -> Path:
    """``$DFLASHOPS_UP_STATE``, else ``$XDG_STATE_HOME/dflashops/up`` (``~/.local/state``)."""
    explicit = os.environ.get("DFLASHOPS_UP_STATE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
    return Path(base) / "dflashops" / "up"


def now() -> datetime:
    return datetime.now(UTC)


class StepRecord(BaseModel):
    """One step's last attempt."""

    model_config = ConfigDict(extra="forbid")

    status: StepStatus
    digest: str = ""  # the step's inputs chained onto the step before (see plan.chain_digests)
    inputs: dict[str, str] = {}  # each own input's short digest: says which input changed
    started_at: datetime | None = None
    finished_at: datetime | None = None
    seconds: float | None = None
    summary: str = ""
    error: str | None = None
    forced: bool = False  # went on over drafter check errors (--force)
    outputs: dict[str, Any] = {}


class PairRecord(BaseModel):
    """Everything ``up`` knows about one pair."""

    model_config = ConfigDict(extra="forbid")

    pair: str
    playbook: str  # the playbook file
    playbook_name: str
    container: str
    cluster: str
    node: str
    steps: dict[str, StepRecord] = {}
    # k* found by tune, per tune key (drafter files, playbook without k): reused, not re-tuned
    tuned: dict[str, dict[str, Any]] = {}
    updated_at: datetime | None = None

    def step(self, name: str) -> StepRecord | None:
        return self.steps.get(name)


def pair_id(cluster: str, container: str, playbook_name: str) -> str:
    """``playbook@container`` with the cluster, safe as a folder name."""
    return _UNSAFE.sub("_", f"{playbook_name}@{cluster}.{container}")


def pair_dir(state: Path, pair: str) -> Path:
    return state / pair


def load_record(state: Path, pair: str) -> PairRecord | None:
    """The pair's record, or None when there is none yet."""
    path = pair_dir(state, pair) / RECORD_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UpError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        return PairRecord.model_validate_json(text)
    except ValidationError as exc:
        raise UpError(
            f"{path} is not an up run record ({exc.error_count()} problem(s))",
            hint=f"delete {path} to start the pair afresh",
        ) from None


def save_record(state: Path, record: PairRecord) -> Path:
    """Write the record atomically (a temporary file renamed over the old one)."""
    folder = pair_dir(state, record.pair)
    folder.mkdir(parents=True, exist_ok=True)
    record.updated_at = now()
    path = folder / RECORD_FILE
    tmp = folder / f".{RECORD_FILE}.{os.getpid()}.tmp"
    tmp.write_text(record.model_dump_json(indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path
