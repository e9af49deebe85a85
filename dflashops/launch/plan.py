"""What a launch would change: files against the container, spec against the manifest.

Pure functions over facts (remote sha256s, the deployed manifest, the run state), so the
decision "push and restart" versus "nothing changed" is unit-tested with canned facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from dflashops.deployment.manifest import DeployedManifest
from dflashops.launch.lifecycle import RunState
from dflashops.launch.render import Rendered

FileAction = Literal["create", "update", "same"]


class FileChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    action: FileAction
    mode: str
    secret: bool = False


@dataclass(frozen=True)
class Decision:
    restart: bool
    reason: str


def file_changes(
    rendered: Rendered, remote: Mapping[str, tuple[str, int] | None]
) -> list[FileChange]:
    changes = []
    for f in rendered.files:
        now = remote.get(f.path)
        action: FileAction = (
            "create" if now is None else "same" if now == (f.sha256, f.mode) else "update"
        )
        changes.append(FileChange(path=f.path, action=action, mode=f"{f.mode:o}", secret=f.secret))
    return changes


def decide(
    changes: list[FileChange],
    state: RunState,
    manifest: DeployedManifest | None,
    *,
    rebuild: bool = False,
) -> Decision:
    """``rebuild``: ``deployed.json`` is unreadable and ``--force`` rebuilds it (from what runs,
    when the files are the rendered ones and the server runs)."""
    changed = [c.path for c in changes if c.action != "same"]
    if changed:
        return Decision(True, "changed: " + ", ".join(changed))
    if rebuild and state.server_pid is not None:
        return Decision(False, "files unchanged and the server is running (deployed.json rebuilt)")
    if manifest is None:
        return Decision(True, "no deployment manifest")
    if state.server_pid is None:
        return Decision(True, "the server is not running")
    return Decision(False, "files unchanged and the server is running")


def spec_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for every spec key that differs (argv as added/removed arguments)."""
    if old is None:
        return []
    lines = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if key == "argv" and isinstance(before, list) and isinstance(after, list):
            removed = [a for a in before if a not in after]
            added = [a for a in after if a not in before]
            lines.append(f"argv: -{_short(removed)} +{_short(added)}")
        else:
            lines.append(f"{key}: {_short(before)} -> {_short(after)}")
    return lines


def _short(value: Any, width: int = 100) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."
