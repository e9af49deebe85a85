"""What a failed start must undo, and how: the pushed files' backups put back (created files
removed), the previous server started again, and a one-line reason from the readiness result."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from dflashops.deployment.manifest import write_manifest
from dflashops.errors import DflashopsError
from dflashops.launch import lifecycle
from dflashops.launch.facts import HostFacts
from dflashops.launch.readiness import Phase, ReadinessResult, deployed_wait
from dflashops.progress import Say
from dflashops.remote import PutResult, SshConnection


def failure_of(result: ReadinessResult, timeout_s: float) -> tuple[str, int | None]:
    """(message, exit code) of a start that did not become ready."""
    last = result.last
    if result.phase is Phase.TIMED_OUT:
        where = last.detail if last and last.detail else result.phase.value
        return f"not ready within {timeout_s:.0f}s (last: {where})", None
    code = last.exit_code if last else None
    return "the server exited" + (f" with code {code}" if code is not None else ""), code


def restore(conn: SshConnection, pushed: Sequence[PutResult]) -> None:
    """Undo a ``put_files``: put each backup back, remove each file it created."""
    q = shlex.quote
    lines = []
    for result in pushed:
        if not result.changed:
            continue
        if result.backup:
            temp = f"{result.path}.dfo-restore.tmp"
            lines.append(
                f"cp -p -- {q(result.backup)} {q(temp)} && mv -fT -- {q(temp)} {q(result.path)}"
            )
        elif result.created:
            lines.append(f"rm -f -- {q(result.path)}")
    if lines:
        conn.run(" && ".join(lines), deadline=60.0, display="restore previous files")


@dataclass(frozen=True)
class PreviousServer:
    """What became of the server that ran before a failed launch."""

    serving: bool | None  # None: started again, not waited for (Ctrl-C)
    why: str = ""  # why it did not come back

    def outcome(self, endpoint: str | None) -> str:
        if self.serving is None:
            return f"rolled back; the previous server is starting again at {endpoint or '?'}"
        if self.serving:
            return f"rolled back; the previous server serves again at {endpoint or '?'}"
        return f"rolled back, but the previous server did not come back ({self.why})"


@dataclass(frozen=True)
class Restarted:
    """The previous server, started again: its pid, and where its events and log begin."""

    pid: int
    before: lifecycle.RunState
    started_at: datetime


def start_previous(conn: SshConnection, facts: HostFacts, *, systemd: bool) -> Restarted:
    """Start the server that ran before a failed launch again, its files put back; its manifest
    gets the new pid at once, so it never names a dead process (``ready_in_s`` once it serves).
    Raises :class:`~dflashops.errors.DflashopsError` when it does not start."""
    before = lifecycle.run_state(conn, facts.layout)
    pid = lifecycle.start(conn, before, systemd=systemd, layout=facts.layout)
    restarted = Restarted(pid, before, datetime.now(UTC))
    if facts.manifest is not None:
        update = {"pid": pid, "started_at": restarted.started_at, "ready_in_s": None}
        write_manifest(conn, facts.manifest.model_copy(update=update), facts.layout)
    return restarted


def await_previous(
    conn: SshConnection,
    facts: HostFacts,
    restarted: Restarted,
    *,
    api_key: str | None,
    timeout_s: float,
    say: Say,
) -> PreviousServer:
    """Wait until the restarted previous server serves (its manifest gets its ready time)."""
    manifest = facts.manifest
    if manifest is None:
        return PreviousServer(True)
    before = restarted.before
    watch = lifecycle.Watcher(
        conn, facts.layout, restarted.pid, before.events_size, before.log_size
    )
    try:
        result = deployed_wait(watch, manifest, api_key, timeout_s=timeout_s, progress=say)
    except DflashopsError as exc:
        return PreviousServer(False, f"it could not be watched: {exc.message}")
    if not result.ready:
        message, _code = failure_of(result, timeout_s)
        tail = lifecycle.log_tail(conn, facts.layout, before.log_size, 1)
        return PreviousServer(False, message + (f"; its log ends: {tail[-1]}" if tail else ""))
    update = {
        "pid": restarted.pid,
        "started_at": restarted.started_at,
        "ready_in_s": round(result.elapsed_s, 1),
    }
    write_manifest(conn, manifest.model_copy(update=update), facts.layout)
    return PreviousServer(True)
