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
from dflashops.pydantic_errors import first_error_line

# pending: this run will run it (a run stopped early leaves it so, and the next one runs it)
StepStatus = Literal["ok", "failed", "running", "pending"]
RECORD_FILE = "record.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9@._-]+")


class UpError(DflashopsError):
    """A step of ``up`` failed, or its state folder cannot be used."""


class RecordError(UpError):
    """A pair's ``record.json`` is there but is not a run record (cut short, not JSON, another
    shape): invalid input, like a broken playbook; its pair fails, the other pairs go on."""

    cli_exit_code = 2

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"{path}: not an up run record ({reason})",
            hint=f"delete {path}, or rerun with --from provision, to start the pair afresh",
        )
        self.path = path


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
    """The pair's record, or None when there is none yet; :class:`RecordError` when the file
    is not one."""
    path = pair_dir(state, pair) / RECORD_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UpError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        record = PairRecord.model_validate_json(data)
    except ValidationError as exc:
        # pydantic reads the bytes as JSON itself: cut short, not UTF-8, not JSON all land here
        raise RecordError(path, first_error_line(exc, root="the document")) from None
    if record.pair != pair:  # copied from another pair's folder
        raise RecordError(path, f"it is the record of {record.pair}")
    return record


def read_record(
    state: Path, pair: str, *, afresh: bool, keep: bool
) -> tuple[PairRecord | None, str | None]:
    """The pair's record (None: none yet) and a warning. An unreadable record raises
    :class:`RecordError` unless the run starts the pair ``afresh`` (``--from provision``): then
    it reads as none, and a run that writes (``keep``) renames it aside for a post-mortem."""
    try:
        return load_record(state, pair), None
    except RecordError as exc:
        if not afresh:
            raise
        if keep:
            aside = exc.path.with_name(f"{RECORD_FILE}.unreadable-{now():%Y%m%dT%H%M%SZ}")
            exc.path.replace(aside)
            kept = f"kept as {aside.name}"
        else:
            kept = "a run keeps it aside"
        return None, f"{exc.path} was not an up run record; the pair starts afresh ({kept})"


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
