"""Run one stage of a training job, and tell whether it already ran.

The one entry point both sides use: ``python -m dflashops.training STAGE --job PATH`` (the
container side of ``drafter train``) is a thin wrapper around :func:`run_stage`, and the lab
builds its drafter by calling :func:`run_stage` in-process.

A stage:

- appends its progress, the log records of the libraries it drives (``speculators``,
  ``transformers``, ``datasets``) and, on failure, the traceback to ``logs/<stage>.log``;
- clears the finished markers of the stages after it when it starts (their inputs change), and
  writes its own, ``stages/<stage>.json`` (``{"stage", "summary", "started", "finished",
  "seconds"}``), when it finishes;
- keeps what it did when it fails, so a rerun continues: the data stage regenerates only the
  samples it lacks, prepare computes only missing hidden states, train resumes from the last
  checkpoint.

Importable without torch: the stage modules import torch, transformers and ``speculators``
inside their functions, so the data stage runs in any venv that has httpx.
"""

from __future__ import annotations

import json
import logging
import os
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dflashops.errors import DflashopsError
from dflashops.progress import Say, quiet
from dflashops.training.dataset import read_samples
from dflashops.training.export import export_drafter
from dflashops.training.job import STAGES, Stage, TrainingJob
from dflashops.training.prepare import prepare_data
from dflashops.training.regenerate import RegenerationSettings, regenerate
from dflashops.training.trainer import METRICS_LOGGER, train_drafter

LOG_TAIL_LINES = 20
# the loggers of the libraries the stages drive; their records go to the stage's log
LIBRARY_LOGGERS = ("speculators", "transformers", "datasets", "torch", "py.warnings")


class TrainingStageError(DflashopsError):
    """A stage failed; what it finished is kept in the run's folder, the full story in its log."""

    def __init__(self, stage: Stage, message: str, *, log: str, hint: str | None = None) -> None:
        super().__init__(f"{stage} stage: {message}", hint=hint or f"see {log}")
        self.stage = stage
        self.log = log


def stage_done(job: TrainingJob, stage: Stage) -> dict[str, Any] | None:
    """The record ``stages/<stage>.json`` holds (``summary``, timing), or None if the stage has
    not finished since the stages before it last ran."""
    try:
        data = json.loads(Path(job.paths.stage_done(stage)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_stage(job: TrainingJob, stage: Stage, say: Say = quiet) -> dict[str, Any]:
    """Run ``stage`` of ``job``; return its summary (also written to ``stages/<stage>.json``).

    Raises :class:`TrainingStageError` (or the stage's own ``DflashopsError``, e.g. a dataset's
    ``file:line`` error) when it fails; the log then ends with the traceback."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}")
    paths = job.paths
    log_path = Path(paths.log(stage))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    for later in STAGES[STAGES.index(stage) :]:
        Path(paths.stage_done(later)).unlink(missing_ok=True)
    started = time.time()
    with log_path.open("a", encoding="utf-8") as log, _library_logs_to(log):
        _write(log, f"== {stage} stage of {job.name} started")

        def logged_say(message: str) -> None:
            _write(log, message)
            say(message)

        try:
            summary = _RUNNERS[stage](job, logged_say)
        except DflashopsError as exc:
            _write(log, "".join(traceback.format_exception(exc)))
            raise
        except Exception as exc:
            _write(log, "".join(traceback.format_exception(exc)))
            raise TrainingStageError(stage, _one_line(exc), log=str(log_path)) from exc
        seconds = round(time.time() - started, 1)
        _write(log, f"== {stage} stage finished in {seconds} s: {json.dumps(summary)}")
    record = {
        "stage": stage,
        "summary": summary,
        "started": _iso(started),
        "finished": _iso(time.time()),
        "seconds": seconds,
    }
    done = Path(paths.stage_done(stage))
    done.parent.mkdir(parents=True, exist_ok=True)
    temporary = done.with_suffix(".tmp")
    temporary.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(done)  # a reader never sees half a record
    return summary


def log_tail(job: TrainingJob, stage: Stage, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of the stage's log (empty when it has none)."""
    try:
        text = Path(job.paths.log(stage)).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def run_data_stage(job: TrainingJob, say: Say) -> dict[str, Any]:
    """The data stage: the dataset's prompts answered again by the served target."""
    samples = read_samples(Path(job.dataset))
    if job.data.max_samples is not None:
        samples = samples[: job.data.max_samples]
    settings = RegenerationSettings(
        base_url=job.data.base_url,
        model=job.data.served_model,
        temperature=job.data.temperature,
        max_tokens=job.data.max_tokens,
        thinking=job.data.thinking,
        concurrency=job.data.concurrency,
        api_key=os.environ.get(job.data.api_key_env) if job.data.api_key_env else None,
    )
    result = regenerate(samples, Path(job.paths.regenerated), settings, say=say)
    return {
        "samples": result.total,
        "already_done": result.already_done,
        "regenerated": result.regenerated,
        "output": str(result.output),
    }


_RUNNERS: dict[Stage, Callable[[TrainingJob, Say], dict[str, Any]]] = {
    "data": run_data_stage,
    "prepare": prepare_data,
    "train": train_drafter,
    "export": export_drafter,
}


@contextmanager
def _library_logs_to(log: Any) -> Iterator[None]:
    """Send the driven libraries' log records (and Python warnings) to ``log`` while a stage
    runs; restored afterwards, so an in-process caller's logging is left as it was.

    The handler sits on the root logger: ``speculators`` reconfigures its own loggers when its
    trainer starts (dropping handlers added to them), but its records still propagate."""
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    handler.addFilter(_from_libraries)
    root, ours = logging.getLogger(), logging.getLogger("speculators")
    level = ours.level
    ours.setLevel(logging.INFO)  # its progress (resuming, checkpoints) is INFO
    root.addHandler(handler)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        ours.setLevel(level)


def _from_libraries(record: logging.LogRecord) -> bool:
    """A record of a driven library; the per-step metric records go to metrics.jsonl instead."""
    if record.name == METRICS_LOGGER:
        return False
    return any(record.name == n or record.name.startswith(n + ".") for n in LIBRARY_LOGGERS)


def _write(log: Any, message: str) -> None:
    log.write(f"{datetime.now(UTC).strftime('%H:%M:%S')} {message.rstrip()}\n")
    log.flush()


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
