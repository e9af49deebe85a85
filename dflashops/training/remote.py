"""Run one training stage in the container and follow it until it ends.

A stage runs as ``<engine venv>/bin/python -m dflashops.training STAGE --job <folder>/job.json``
with the engine's environment (``secrets.env`` sourced and the playbook's ``server.env``
exported, as ``launch.sh`` does), so the data stage reads the server's API key from the variable
``job.data.api_key_env`` names and the key never appears on a command line.

It is started in a session of its own (``setsid``), detached from the SSH channel: a stage can
run for hours and a dropped connection must not kill it. Its stdout, stderr and exit status go to
``logs/<stage>.stdout|.stderr|.exit`` and its pid to ``logs/<stage>.pid``; this side polls them,
each poll a short bounded SSH command, and passes every ``{"message": …}`` line to ``say``. The
``{"done": {…}}`` line is the stage's summary. A failure (non-zero exit, or a process that
vanished) raises :class:`StageFailed` naming the stage, the command, its error line and the tail
of its log; whatever the stage finished stays in the folder for the rerun. Interrupting this
side (Ctrl-C) interrupts the stage too (SIGTERM to its python, on which ``speculators`` saves a
checkpoint), then stops.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dflashops.errors import DflashopsError
from dflashops.progress import Say
from dflashops.remote import SshConnection
from dflashops.training.facts import stage_pidfile
from dflashops.training.job import Stage, TrainingJob

POLL_S = 1.0
POLL_DEADLINE_S = 60.0
START_DEADLINE_S = 60.0
MAX_CHUNK = 1 << 20  # stdout bytes read per poll
TAIL_LINES = 8
_MARK = "--dflashops-stage--"


class StageFailed(DflashopsError):
    """A stage failed in the container; what it finished is kept in the run's folder."""

    def __init__(
        self,
        *,
        stage: Stage,
        container: str,
        command: str,
        exit_code: int | None,
        error: str,
        log_tail: list[str],
        folder: str,
    ) -> None:
        status = "vanished without an exit status" if exit_code is None else f"exit {exit_code}"
        tail = " / ".join(log_tail[-TAIL_LINES:]) or "(empty)"
        super().__init__(
            f"the {stage} stage failed in {container} ({status}): {error or 'no error line'}; "
            f"command: {command}; log tail: {tail}",
            hint=f"what it finished is kept in {folder}; run `drafter train` again to continue",
        )
        self.stage = stage
        self.command = command
        self.exit_code = exit_code
        self.error = error
        self.log_tail = log_tail


@dataclass(frozen=True)
class StageFiles:
    """Where one stage's process writes, beside its log."""

    stdout: str
    stderr: str
    exit: str
    pid: str
    log: str

    @classmethod
    def of(cls, job: TrainingJob, stage: Stage) -> StageFiles:
        logs = posixpath.join(job.folder, "logs")
        return cls(
            stdout=posixpath.join(logs, f"{stage}.stdout"),
            stderr=posixpath.join(logs, f"{stage}.stderr"),
            exit=posixpath.join(logs, f"{stage}.exit"),
            pid=stage_pidfile(job.paths, stage),
            log=job.paths.log(stage),
        )


def stage_command(job: TrainingJob, stage: Stage, python: str) -> str:
    """The command a stage runs (as errors and ``--dry-run`` show it)."""
    return f"{python} -m dflashops.training {stage} --job {job.paths.job}"


def start_script(
    job: TrainingJob,
    stage: Stage,
    python: str,
    *,
    env: Mapping[str, str],
    secrets: str,
) -> str:
    """Start the stage detached; print its pid."""
    q = shlex.quote
    files = StageFiles.of(job, stage)
    inner = "; ".join(
        [
            f"if [ -f {q(secrets)} ]; then set -a; . {q(secrets)}; set +a; fi",
            *(f"export {name}={q(value)}" for name, value in sorted(env.items())),
            "export PYTHONUNBUFFERED=1",
            f"cd {q(job.folder)}",
            f"{q(python)} -m dflashops.training {q(stage)} --job {q(job.paths.job)}",
            f"echo $? > {q(files.exit)}.tmp",
            f"mv {q(files.exit)}.tmp {q(files.exit)}",
        ]
    )
    return "\n".join(
        [
            f"mkdir -p {q(posixpath.dirname(files.stdout))}",
            f"rm -f {q(files.exit)}",
            f"setsid sh -c {q(inner)} > {q(files.stdout)} 2> {q(files.stderr)} < /dev/null &",
            f"echo $! > {q(files.pid)}",
            "echo $!",
        ]
    )


def poll_script(files: StageFiles, offset: int) -> str:
    q = shlex.quote
    return "\n".join(
        [
            f"echo {_MARK}exit; cat {q(files.exit)} 2>/dev/null",
            f'echo {_MARK}alive; p=$(cat {q(files.pid)} 2>/dev/null); kill -0 "$p" 2>/dev/null'
            " && echo yes",
            f"echo {_MARK}out; tail -c +{offset + 1} {q(files.stdout)} 2>/dev/null"
            f" | head -c {MAX_CHUNK}",
            "true",
        ]
    )


def _sections(output: str) -> dict[str, str]:
    sections: dict[str, str] = {}
    current = None
    rest = output
    while rest:
        line, newline, rest = rest.partition("\n")
        if line.startswith(_MARK) and (current != "out"):
            current = line[len(_MARK) :]
            sections[current] = ""
        elif current is not None:
            sections[current] += line + newline
    return sections


class StageFollower:
    """Turns a stage's stdout into ``say`` calls and keeps its summary (a pure parser)."""

    def __init__(self, stage: Stage, say: Say) -> None:
        self.stage = stage
        self.say = say
        self.pending = ""
        self.summary: dict[str, Any] | None = None

    def feed(self, chunk: str) -> None:
        text = self.pending + chunk
        *lines, self.pending = text.split("\n")
        for line in lines:
            self._line(line.strip())

    def _line(self, line: str) -> None:
        if not line.startswith("{"):
            return
        try:
            data = json.loads(line)
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        if isinstance(data.get("done"), dict):
            self.summary = data["done"]
        elif "message" in data:
            message = str(data["message"])
            prefix = f"{self.stage}:"
            self.say(message if message.startswith(prefix) else f"{prefix} {message}")


def run_remote_stage(
    conn: SshConnection,
    job: TrainingJob,
    stage: Stage,
    python: str,
    *,
    container: str,
    env: Mapping[str, str],
    secrets: str,
    say: Say,
    poll_s: float = POLL_S,
) -> dict[str, Any]:
    """Run ``stage`` in the container until it ends; its summary, or :class:`StageFailed`."""
    files = StageFiles.of(job, stage)
    command = stage_command(job, stage, python)
    started = conn.run(
        start_script(job, stage, python, env=env, secrets=secrets),
        deadline=START_DEADLINE_S,
        display=f"start the {stage} stage",
    )
    pid = started.stdout.strip()
    say(f"{stage}: started in {container} (pid {pid})")
    follower = StageFollower(stage, say)
    offset = 0
    gone = 0  # polls that found neither the process nor its exit status
    try:
        while True:
            output = conn.run(
                poll_script(files, offset), deadline=POLL_DEADLINE_S, display=f"poll {stage}"
            ).stdout
            parts = _sections(output)
            chunk = parts.get("out", "")
            offset += len(chunk.encode())
            follower.feed(chunk)
            code = parts.get("exit", "").strip()
            if code and len(chunk) < MAX_CHUNK:
                break
            # the status is written just after the process ends: look twice before giving up
            gone = gone + 1 if not code and parts.get("alive", "").strip() != "yes" else 0
            if gone >= 2:
                break
            time.sleep(poll_s)
    except KeyboardInterrupt:
        if pid.isdigit():
            # SIGTERM to the stage's python (speculators saves a checkpoint on it); its shell
            # lives on to record the exit status
            conn.run(
                f"pkill -TERM -P {pid} 2>/dev/null || kill -TERM -- -{pid} 2>/dev/null; true",
                deadline=POLL_DEADLINE_S,
            )
        raise
    exit_code = int(code) if code.lstrip("-").isdigit() else None
    if exit_code == 0 and follower.summary is not None:
        return follower.summary
    raise StageFailed(
        stage=stage,
        container=container,
        command=command,
        exit_code=exit_code,
        error=_error_line(conn, files),
        log_tail=_log_tail(conn, files.log),
        folder=job.folder,
    )


def _error_line(conn: SshConnection, files: StageFiles) -> str:
    text = conn.run(
        f"tail -n 5 {shlex.quote(files.stderr)} 2>/dev/null; true", deadline=POLL_DEADLINE_S
    ).stdout
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or [""])[-1].removeprefix("error: ")


def _log_tail(conn: SshConnection, log: str) -> list[str]:
    text = conn.run(
        f"tail -n {TAIL_LINES} {shlex.quote(log)} 2>/dev/null; true", deadline=POLL_DEADLINE_S
    ).stdout
    return [line.strip() for line in text.splitlines() if line.strip()]
