"""What a failed start must undo, and how: the pushed files' backups put back (created files
removed), and a one-line reason from the readiness result."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from dflashops.deployment.manifest import DeployedManifest
from dflashops.launch import lifecycle
from dflashops.launch.readiness import Phase, ReadinessResult
from dflashops.remote import PutResult, SshConnection


@dataclass(frozen=True)
class Attempt:
    """What a failed start must undo."""

    before: lifecycle.RunState
    pushed: list[PutResult]
    was_running: bool
    manifest: DeployedManifest | None
    systemd: bool


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


def endpoint_of(manifest: DeployedManifest | None) -> str | None:
    return manifest.endpoint if manifest else None
