"""What a container holds for one training run, read by one probe (facts → plan → apply).

One shell script lists the run folder: ``job.json``, each finished stage's ``stages/<stage>.json``,
a stage still running (its pid file and a live process), the pushed dataset's sha256, how many
samples the data stage wrote, the checkpoints and whether an export exists; plus whether the
engine venv's interpreter is there. The server's state and manifest are read beside it.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from dataclasses import dataclass, field
from typing import Any

from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.manifest import DeployedManifest, read_manifest
from dflashops.launch import lifecycle
from dflashops.remote import SshConnection
from dflashops.training.job import STAGES, Stage, TrainingFolder

PROBE_DEADLINE_S = 60.0
_MARK = "--dflashops-train--"


def stage_pidfile(folder: TrainingFolder, stage: Stage) -> str:
    """Where a running stage's pid is kept (beside its log)."""
    return posixpath.join(folder.root, "logs", f"{stage}.pid")


@dataclass(frozen=True)
class RunFacts:
    """The run folder as found (everything empty when it does not exist yet)."""

    exists: bool = False
    job_text: str | None = None
    done: dict[Stage, dict[str, Any]] = field(default_factory=dict)
    running: dict[Stage, int] = field(default_factory=dict)  # stage -> live pid
    dataset_sha256: str | None = None
    regenerated_samples: int = 0
    checkpoints: tuple[str, ...] = ()  # whole checkpoints, oldest first
    has_export: bool = False


@dataclass(frozen=True)
class ContainerFacts:
    run: RunFacts
    engine_python: bool
    server_running: bool
    server_pid: int | None
    manifest: DeployedManifest | None


def probe_script(folder: TrainingFolder, python: str) -> str:
    q = shlex.quote
    root = q(folder.root)
    export_config = q(posixpath.join(folder.export, "config.json"))
    lines = [
        f"echo {_MARK}python; test -x {q(python)} && echo yes",
        f"cd {root} 2>/dev/null || {{ echo {_MARK}absent; exit 0; }}",
        f"echo {_MARK}job; cat {q(folder.job)} 2>/dev/null",
        f"echo {_MARK}dataset; sha256sum < {q(folder.dataset)} 2>/dev/null",
        f"echo {_MARK}regenerated; wc -l < {q(folder.regenerated)} 2>/dev/null",
        # a checkpoint is whole once speculators wrote its training_state.json (last)
        f"echo {_MARK}checkpoints; ls -1 {q(folder.checkpoints)} 2>/dev/null | sort -n | "
        f"while read d; do test -f {q(folder.checkpoints)}/$d/training_state.json && echo $d; "
        "done",
        f"echo {_MARK}export; test -f {export_config} && echo yes",
    ]
    for stage in STAGES:
        pidfile = q(stage_pidfile(folder, stage))
        lines += [
            f"echo {_MARK}done:{stage}; cat {q(folder.stage_done(stage))} 2>/dev/null",
            f"echo {_MARK}running:{stage}; "
            f'p=$(cat {pidfile} 2>/dev/null); [ -n "$p" ] && kill -0 "$p" 2>/dev/null && echo "$p"',
        ]
    return "\n".join(lines) + "\ntrue\n"


def parse_probe(output: str) -> tuple[RunFacts, bool]:
    """(the run folder's facts, whether the engine interpreter exists) from the probe's output."""
    sections: dict[str, str] = {}
    current = None
    for line in output.splitlines(keepends=True):
        if line.startswith(_MARK):
            current = line[len(_MARK) :].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line
    python = sections.get("python", "").strip() == "yes"
    if "absent" in sections:
        return RunFacts(), python
    done: dict[Stage, dict[str, Any]] = {}
    running: dict[Stage, int] = {}
    for stage in STAGES:
        summary = _json_object(sections.get(f"done:{stage}", ""))
        if summary is not None:
            done[stage] = summary
        pid = sections.get(f"running:{stage}", "").strip()
        if pid.isdigit():
            running[stage] = int(pid)
    sha = sections.get("dataset", "").split()
    count = sections.get("regenerated", "").strip()
    return (
        RunFacts(
            exists=True,
            job_text=sections.get("job") or None,
            done=done,
            running=running,
            dataset_sha256=sha[0] if sha else None,
            regenerated_samples=int(count) if count.isdigit() else 0,
            checkpoints=tuple(sections.get("checkpoints", "").split()),
            has_export=sections.get("export", "").strip() == "yes",
        ),
        python,
    )


def _json_object(text: str) -> dict[str, Any] | None:
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return {"unreadable": text.strip()[:200]}  # a stage file we cannot read still says done
    return data if isinstance(data, dict) else {"value": data}


def probe(
    conn: SshConnection, folder: TrainingFolder, python: str, layout: Layout = DEFAULT_LAYOUT
) -> ContainerFacts:
    """Read the run folder, the engine interpreter, the server's state and its manifest."""
    output = conn.run(
        probe_script(folder, python), deadline=PROBE_DEADLINE_S, display="probe training run"
    ).stdout
    run, python_ok = parse_probe(output)
    state = lifecycle.run_state(conn, layout)
    return ContainerFacts(
        run=run,
        engine_python=python_ok,
        server_running=state.running,
        server_pid=state.server_pid,
        manifest=read_manifest(conn, layout),
    )
