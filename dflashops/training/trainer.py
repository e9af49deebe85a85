"""The train stage: ``speculators``' own training run (``speculators train``) on the prepared data.

The run is ``speculators.train.cli.main`` itself, given the config ``speculators train`` would
build from its flags (``TrainConfig.from_sources``; the equivalent command line is recorded in
``checkpoints/train_command.txt`` and the resolved config in ``checkpoints/run.yaml``): its
``DFlashDraftModel.from_training_args`` draft (shape from the job: layers, block size,
``aux_hidden_state_layer_ids`` = target layer ids + 1, mask token, every layer
``sliding_attention`` or ``full_attention``), its dataset and packing sampler over
``data/prepared``, its loss (D-PACE cross-entropy), Muon/AdamW optimizers, linear schedule,
checkpoints in ``checkpoints/<epoch>/`` (resumed from the last one on a rerun) and validation on
the held-out 10% of the rows.

On every device: ``--loss-implementation eager`` (speculators' default fused loss is a Triton
kernel, and under ``torch.compile`` with torch 2.11 on an H200 it failed to trace) and
``--num-workers 0`` (no spawned loader processes). What else is adapted, only on the CPU:

- options: ``--draft-attn-impl sdpa`` (flex attention needs Triton) and
  ``--hidden-states-dtype float32`` (bfloat16 autocast is CUDA's);
- ``Trainer`` subclass: its ``local_rank`` (the device it moves the model and every batch to,
  ``.to(local_rank)``, which is ``cuda:0`` for rank 0) is the CPU; speculators' autocast then
  names an absent CUDA device and is disabled, so the step runs in float32;
- two patched names: the checkpointer loads a resumed checkpoint onto ``get_current_device()``,
  which answers ``cuda:0`` without an accelerator (it answers ``cpu``), and the step timer
  calls ``torch.accelerator.synchronize()`` before each mark (a subclass just reads the clock).

On CUDA the trainer runs as speculators ships it (flex attention, bfloat16 hidden states and
autocast, its ``torch.compile`` of the forward); checked on one H200 (torch 2.11, CUDA 13).

On any device the subclass also (a) makes ``train.max_steps`` exact: speculators checks
``--max-steps`` only inside an epoch, so a later epoch would still take a step; the run gets
just the epochs that hold ``max_steps`` steps (``epochs`` is then not used); (b) turns
``train.checkpoint_every`` (steps) into speculators' ``--checkpoint-freq`` (epochs, or a fraction
of one) and always saves at the run's end. The tqdm bars are off (progress is reported per step
instead), and every logged step's metrics go to ``metrics.jsonl``: ``{"step", "epoch", "loss",
"lr", "full_acc", "position_<i>_acc", "eal", ...}`` (validation lines carry ``val_`` keys and no
``loss``). On a rerun, lines after the checkpoint it resumes from are dropped first.

Deterministic on the CPU for a fixed ``train.seed`` and ``OMP_NUM_THREADS=1`` (byte-identical
runs); a resumed run continues from bfloat16 checkpoints: close to an uninterrupted one, not equal.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dflashops.errors import DflashopsError
from dflashops.progress import Say
from dflashops.training.interrupts import interrupts_pass_through_logging
from dflashops.training.job import TrainingJob
from dflashops.training.prepare import RECORD_FILE, torch_device

# the checkpoint speculators saves when a signal stops training (graceful_shutdown.py)
INTERRUPTED = "interrupted"
METRICS_LOGGER = "speculators.metrics"  # speculators' per-step metric records (dicts)


class TrainError(DflashopsError):
    """The train stage cannot start (its inputs are missing or do not fit the job)."""


def train_drafter(job: TrainingJob, say: Say) -> dict[str, Any]:
    """Train (or resume training) the drafter; return steps, final loss and checkpoint."""
    _check_prepared(job)
    from speculators.train import cli  # type: ignore[import-not-found, unused-ignore]
    from speculators.train.config import (  # type: ignore[import-not-found, unused-ignore]
        TrainConfig,
    )

    device = torch_device(job.train.device)
    flags = speculators_flags(job, device)
    cfg = TrainConfig.from_sources(cli=flags, argv=["speculators", "train", *as_argv(flags)])
    checkpoints = Path(job.paths.checkpoints)
    for torn in drop_unfinished_checkpoints(checkpoints):
        say(f"train: removed {torn}: its save was interrupted")
    resume_step = resume_global_step(checkpoints)
    metrics = Path(job.paths.metrics)
    trim_metrics(metrics, below_step=resume_step)
    say(
        f"train: resuming from step {resume_step} ({checkpoints})"
        if resume_step
        else f"train: starting on {device} ({job.train.max_steps or job.train.epochs} "
        + ("steps)" if job.train.max_steps else "epochs)")
    )
    interrupted = checkpoints / INTERRUPTED
    shutil.rmtree(interrupted, ignore_errors=True)
    started = time.monotonic()
    recorder = _MetricsRecorder(metrics, say, job.train.max_steps)
    with _adapted_to(device, job, recorder):
        cli.main(cfg)
    seconds = time.monotonic() - started
    if interrupted.exists():
        # speculators catches SIGINT/SIGTERM, saves "interrupted" and returns as if finished;
        # that save is not one it resumes from (it asks for a manual rename), so drop it and
        # fail: a rerun resumes from the last numbered checkpoint.
        shutil.rmtree(interrupted, ignore_errors=True)
        raise TrainError(
            f"the train stage was interrupted after {recorder.steps} step(s) this run",
            hint=f"rerun to resume from the last checkpoint in {checkpoints}",
        )
    final = read_final_metrics(metrics)
    done = recorder.steps
    return {
        "device": device,
        "resumed_from_step": resume_step,
        "steps": final.get("step", -1) + 1,
        "steps_this_run": done,
        "final_loss": final.get("loss"),
        "seconds": round(seconds, 1),
        "seconds_per_step": round(seconds / done, 3) if done else None,
        "checkpoint": str(last_checkpoint(checkpoints) or ""),
        "metrics": str(metrics),
    }


def speculators_flags(job: TrainingJob, device: str) -> dict[str, Any]:
    """The ``speculators train`` flags (as config dests) for this job on ``device``."""
    shape, settings = job.drafter, job.train
    flags: dict[str, Any] = {
        "speculator_type": "dflash",
        "seed": settings.seed,
        "verifier_name_or_path": job.target,
        "num_layers": shape.num_layers,
        # all layers of one kind; speculators' default is all sliding_attention
        "full_attention_indices": (
            list(range(shape.num_layers)) if shape.layer_types == "full_attention" else []
        ),
        "target_layer_ids": [i + 1 for i in shape.target_layer_ids],  # its aux ids (+1)
        "mask_token_id": shape.mask_token_id,
        "block_size": shape.block_size,
        "data_path": job.paths.prepared,
        "on_missing": "raise",  # every hidden state is on disk: never ask a vLLM server
        "total_seq_len": settings.seq_len,
        "max_anchors": settings.max_anchors,
        "lr": settings.lr,
        "epochs": settings.epochs,
        "save_path": job.paths.checkpoints,
        "log_dir": str(Path(job.paths.log("train")).parent),
        "num_workers": 0,
        "loss_implementation": "eager",
    }
    if settings.max_steps is not None:
        flags["max_steps"] = settings.max_steps
    if device == "cpu":
        flags |= {"draft_attn_impl": "sdpa", "hidden_states_dtype": "float32"}
    return flags


def as_argv(flags: dict[str, Any]) -> list[str]:
    """The flags as ``speculators train`` takes them on its command line."""
    argv: list[str] = []
    for dest, value in flags.items():
        flag = "--" + dest.replace("_", "-")
        if isinstance(value, list):
            argv += [flag, *map(str, value)] if value else []
        else:
            argv += [flag, str(value)]
    return argv


def resume_global_step(checkpoints: Path) -> int:
    """The optimizer step a rerun resumes from (0 without a checkpoint)."""
    last = last_checkpoint(checkpoints)
    if last is None:
        return 0
    try:
        state = json.loads((last / "training_state.json").read_text(encoding="utf-8"))
        return int(state["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def drop_unfinished_checkpoints(checkpoints: Path) -> list[Path]:
    """Remove ``checkpoints/<epoch>/`` folders whose save never finished (speculators writes
    ``training_state.json`` after the weights and optimizer state): speculators would resume from
    the highest epoch and fail on its torn files."""
    torn = [
        d
        for d in (checkpoints.iterdir() if checkpoints.is_dir() else [])
        if d.is_dir()
        and not d.is_symlink()
        and d.name.isdigit()
        and not (d / "training_state.json").is_file()
    ]
    for folder in torn:
        shutil.rmtree(folder)
    return torn


def last_checkpoint(checkpoints: Path) -> Path | None:
    """``checkpoints/<epoch>/`` with the highest epoch (speculators' own choice on resume)."""
    epochs = [
        int(d.name)
        for d in (checkpoints.iterdir() if checkpoints.is_dir() else [])
        if d.is_dir() and not d.is_symlink() and d.name.isdigit()
    ]
    return checkpoints / str(max(epochs)) if epochs else None


def trim_metrics(path: Path, *, below_step: int) -> None:
    """Keep only the lines of steps before ``below_step``, the step a rerun resumes from (it logs
    the rest again); a validation line at ``below_step`` stays, as the epoch it closed does."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError):
            continue  # a line torn by the interruption
        if step < below_step or (step == below_step and "loss" not in row):
            kept.append(line + "\n")
    path.write_text("".join(kept), encoding="utf-8")


def read_final_metrics(path: Path) -> dict[str, Any]:
    """The last training line of ``metrics.jsonl`` (empty when there is none)."""
    last: dict[str, Any] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return last
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "loss" in row:
            last = row
    return last


def _check_prepared(job: TrainingJob) -> None:
    """The prepare stage's output exists and was made for this job's target and layers."""
    record_path = Path(job.paths.prepared) / RECORD_FILE
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise TrainError(
            f"no prepared data in {job.paths.prepared}", hint="run the prepare stage first"
        ) from None
    if record.get("target_layer_ids") != list(job.drafter.target_layer_ids):
        raise TrainError(
            f"the prepared hidden states are of target layers {record.get('target_layer_ids')}, "
            f"the job trains on {list(job.drafter.target_layer_ids)}",
            hint="run the prepare stage again",
        )


class _MetricsRecorder(logging.Handler):
    """Writes speculators' metric records (``speculators.metrics``) to ``metrics.jsonl`` and
    reports each step."""

    def __init__(self, path: Path, say: Say, max_steps: int | None) -> None:
        super().__init__(logging.INFO)
        self.path, self.say, self.max_steps = path, say, max_steps
        self.steps = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.msg
        if record.name != METRICS_LOGGER or not isinstance(message, dict):
            return
        step = int(getattr(record, "step", message.get("global_step")) or 0)
        if isinstance(message.get("train"), dict):
            row = {"step": step, "epoch": message.get("epoch"), **message["train"]}
            row["lr"] = message.get("lr")
            self.steps += 1
            of = f"/{self.max_steps}" if self.max_steps else ""
            self.say(f"train: step {step + 1}{of} loss {row.get('loss', float('nan')):.4f}")
        elif isinstance(message.get("val"), dict):
            val = {f"val_{k.removesuffix('_epoch')}": v for k, v in message["val"].items()}
            row = {"step": step, "epoch": message.get("epoch"), **val}
        else:
            return
        with self.path.open("a", encoding="utf-8") as sink:
            sink.write(json.dumps(row, default=_plain) + "\n")


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)


@contextmanager
def _adapted_to(device: str, job: TrainingJob, recorder: logging.Handler) -> Iterator[None]:
    """speculators' trainer with this module's subclass (and, on the CPU, its one patch), no tqdm
    bars, metrics to ``recorder``, stop signals kept (``interrupts``); all restored afterwards."""
    from speculators.train import (  # type: ignore[import-not-found, unused-ignore]
        checkpointer,
        cli,
        graceful_shutdown,
        trainer,
    )

    patches: list[tuple[Any, str, Any]] = [
        (cli, "Trainer", _stage_trainer(trainer.Trainer, device, job.train.checkpoint_every)),
        (trainer, "tqdm", lambda iterable, **_: iterable),
    ]
    if device == "cpu":
        patches += [
            (checkpointer, "get_current_device", lambda: "cpu"),
            (trainer, "_StepTimer", _clock_timer(trainer._StepTimer)),
        ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    root = logging.getLogger()
    root.addHandler(recorder)
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        with interrupts_pass_through_logging(graceful_shutdown.TrainingInterruptedError):
            yield
    finally:
        root.removeHandler(recorder)
        for owner, name, value in saved:
            setattr(owner, name, value)


def _stage_trainer(base: Any, device: str, checkpoint_every: int) -> Any:
    """speculators' ``Trainer`` on ``device``, with exact ``max_steps`` and step-based
    checkpoints (see the module docstring)."""
    torch_device = _torch().device(device)

    class StageTrainer(base):  # type: ignore[misc]
        config: Any  # speculators' TrainerConfig (a NamedTuple)

        def __init__(self, model: Any, config: Any, train_loader: Any, val_loader: Any) -> None:
            per_epoch = max(1, len(train_loader))
            if config.max_steps is not None:
                epochs = _epochs_for(train_loader.batch_sampler, config.max_steps, per_epoch)
                config = config._replace(num_epochs=epochs)
            if checkpoint_every >= per_epoch:
                frequency = float(max(1, round(checkpoint_every / per_epoch)))
            else:
                frequency = checkpoint_every / per_epoch
            config = config._replace(checkpoint_freq=frequency)
            super().__init__(model, config, train_loader, val_loader)

        # speculators moves the model and each batch with .to(self.local_rank): rank 0 means
        # cuda:0, so on the CPU the rank it sets is kept aside and the device answers instead
        @property
        def local_rank(self) -> Any:
            return torch_device if device == "cpu" else self._rank_index

        @local_rank.setter
        def local_rank(self, value: int) -> None:
            self._rank_index = value

        def maybe_save_checkpoint(self, epoch: int | str, local_step: int = 0) -> None:
            config: Any = self.config
            if epoch != config.num_epochs - 1 or local_step:
                super().maybe_save_checkpoint(epoch, local_step)
                return
            self.config = config._replace(checkpoint_freq=1.0)
            try:  # the run's last epoch always saves
                super().maybe_save_checkpoint(epoch, local_step)
            finally:
                self.config = config

    return StageTrainer


def _epochs_for(sampler: Any, steps: int, per_epoch: int) -> int:
    """How many epochs hold ``steps`` optimizer steps. speculators' packing sampler packs a new
    permutation each epoch, so epochs differ in length: count them as it will generate them."""
    batches_of = getattr(sampler, "_generate_batches", None)
    if batches_of is None:
        return math.ceil(steps / per_epoch)
    epochs = total = 0
    while total < steps:
        total += max(1, len(batches_of(epochs)))
        epochs += 1
    return epochs


def _clock_timer(base: Any) -> Any:
    """speculators' step timer synchronizes the accelerator before each mark (to time GPU
    work); on the CPU there is none to wait for, so it just reads the clock."""

    class ClockTimer(base):  # type: ignore[misc]
        def mark(self, name: str) -> None:
            if self.enabled:
                self._marks[name] = time.perf_counter()

        def now(self) -> float | None:
            return time.perf_counter() if self.enabled else None

    return ClockTimer


def _torch() -> Any:
    import torch  # type: ignore[import-not-found, unused-ignore]

    return torch
