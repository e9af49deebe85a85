"""Worker tasks: real UPIDs, a background thread each, a log, and PVE's status fields.

A UPID is ``UPID:<node>:<pid>:<pstart>:<starttime>:<type>:<id>:<authid>:`` with pid, pstart and
starttime as 8-digit upper-case hex (``PVE::Tools::upid_encode``). A finished task has status
``stopped`` and exitstatus ``OK``, ``WARNINGS: <n>`` or the error text; its log ends with
``TASK OK`` / ``TASK WARNINGS: <n>`` / ``TASK ERROR: <text>``.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dflashops.lab.pve.auth import Caller
from dflashops.lab.pve.errors import ApiError, TaskFailed

log = logging.getLogger(__name__)

_pids = itertools.count(0x1000)
_PSTART_BASE = 0x0100_0000


@dataclass
class TaskLog:
    """What a worker writes; ``warn`` lines count towards the ``WARNINGS`` exit status."""

    lines: list[str] = field(default_factory=list)
    warnings: int = 0

    def __call__(self, line: str) -> None:
        self.lines.extend(line.rstrip("\n").split("\n"))

    def warn(self, line: str) -> None:
        self.warnings += 1
        self(f"WARN: {line}")


@dataclass
class Task:
    upid: str
    node: str
    pid: int
    pstart: int
    starttime: int
    type: str
    id: str
    caller: Caller
    log: TaskLog = field(default_factory=TaskLog)
    exitstatus: str | None = None
    endtime: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "upid": self.upid,
            "node": self.node,
            "pid": self.pid,
            "pstart": self.pstart,
            "starttime": self.starttime,
            "type": self.type,
            "id": self.id,
            "user": self.caller.user,
            "status": "running" if self.running else "stopped",
        }
        if self.caller.tokenid:
            data["tokenid"] = self.caller.tokenid
        if not self.running:
            data["exitstatus"] = self.exitstatus
        return data

    def list_entry(self) -> dict[str, Any]:
        entry = {key: value for key, value in self.status().items() if key != "exitstatus"}
        if not self.running:
            entry["status"] = self.exitstatus
            entry["endtime"] = self.endtime
        return entry


def encode_upid(
    node: str, pid: int, pstart: int, start: int, *, kind: str, ident: str, who: str
) -> str:
    return f"UPID:{node}:{pid:08X}:{pstart:08X}:{start:08X}:{kind}:{ident}:{who}:"


Worker = Callable[[TaskLog], None]


class TaskRegistry:
    """Runs workers in threads and keeps every task for status and log queries."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()

    def spawn(self, node: str, kind: str, ident: str, caller: Caller, worker: Worker) -> Task:
        pid = next(_pids)
        start = int(time.time())
        pstart = _PSTART_BASE + pid
        upid = encode_upid(node, pid, pstart, start, kind=kind, ident=ident, who=caller.authid)
        task = Task(upid, node, pid, pstart, start, kind, ident, caller)
        with self._lock:
            self._tasks[upid] = task
        thread = threading.Thread(
            target=self._run, args=(task, worker), name=f"pve-task-{kind}-{ident}", daemon=True
        )
        thread.start()
        return task

    def _run(self, task: Task, worker: Worker) -> None:
        try:
            worker(task.log)
        except Exception as exc:
            message = str(exc).strip() or exc.__class__.__name__
            if not isinstance(exc, ApiError | TaskFailed):
                log.exception("task %s crashed", task.upid)
            task.log(f"TASK ERROR: {message}")
            task.exitstatus = message
        else:
            if task.log.warnings:
                task.exitstatus = f"WARNINGS: {task.log.warnings}"
                task.log(f"TASK WARNINGS: {task.log.warnings}")
            else:
                task.exitstatus = "OK"
                task.log("TASK OK")
        task.endtime = int(time.time())
        task.done.set()

    def get(self, upid: str) -> Task | None:
        with self._lock:
            return self._tasks.get(upid)

    def all(self) -> list[Task]:
        with self._lock:
            return list(self._tasks.values())

    def wait_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for task in self.all():
            task.done.wait(max(0.0, deadline - time.monotonic()))
