"""The plan of one ``drafter train`` run: a pure function of the facts (facts → plan → apply).

It says which stages run and which are done already (their ``stages/<stage>.json`` in the
container), what the run will hold (dataset lines and bytes, samples, tokens, the hidden states'
size), where every file goes, what happens to the server, and roughly how long it takes.
``--dry-run`` prints it and changes nothing.

A rerun continues the same job. When the playbook changed since the job was written, only a
change to the train settings (``train.steps``) is continued: train and export run again and the
trainer resumes from its last checkpoint. Any other change (dataset, data settings, drafter
shape) would mix two jobs' data in one folder, so the plan refuses and names the keys.

The time estimate is rough: per-stage start-up plus work at rates measured on the lab (2 CPU
cores, tiny target); on a GPU the same rates are scaled by the target's size and are a guess.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from dflashops.errors import DflashopsError
from dflashops.training.facts import ContainerFacts
from dflashops.training.job import GPU_STAGES, STAGES, Stage, TrainingJob
from dflashops.training.shape import ResolvedShape

StageStatus = Literal["done", "run", "resume", "rerun"]
# keys of job.json that do not change what a stage produces (where the server is reached)
_VOLATILE = {"name", "folder", "data.base_url", "data.served_model", "data.api_key_env"}
BYTES_PER_TOKEN = 4.0  # prompt bytes per token, for the size estimate
FLOAT32 = 4
# rough rates from the lab (2 CPU cores, a 128-wide 4-layer target); scaled by target width
START_S = 20.0  # one stage's interpreter start: torch, transformers, speculators imports
LAB_DECODE_TOK_S = 60.0  # one stream of the served target
LAB_PREPARE_TOK_S = 4000.0
LAB_STEP_S = 0.15
LAB_HIDDEN = 128


class TrainingPlanError(DflashopsError):
    """The run cannot go on as asked (a stage still running, a changed job or dataset)."""


@dataclass(frozen=True)
class DatasetInfo:
    """The dataset as the run sees it."""

    source: Literal["local", "container"]
    path: str  # the local file, or the path in the container
    lines: int
    bytes: int
    samples: int  # after max_samples
    sha256: str | None  # local files only


@dataclass(frozen=True)
class StagePlan:
    stage: Stage
    status: StageStatus
    detail: str
    estimate_s: float


@dataclass(frozen=True)
class TrainPlan:
    container: str
    run: str
    folder: str
    job: TrainingJob
    shape: ResolvedShape
    dataset: DatasetInfo
    stages: tuple[StagePlan, ...]
    sizes: dict[str, int]
    files: tuple[tuple[str, str], ...]  # (what, where)
    server: tuple[str, ...]  # what happens to the server, in order
    push_dataset: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def to_run(self) -> tuple[Stage, ...]:
        return tuple(s.stage for s in self.stages if s.status != "done")

    @property
    def estimate_s(self) -> float:
        return sum(s.estimate_s for s in self.stages)

    def to_json(self) -> dict[str, Any]:
        return {
            "container": self.container,
            "run": self.run,
            "folder": self.folder,
            "stages": [asdict(s) for s in self.stages],
            "estimate_s": round(self.estimate_s),
            "dataset": asdict(self.dataset),
            "sizes": self.sizes,
            "drafter": [
                {"key": key, "value": value, "source": source}
                for key, value, source in self.shape.rows()
            ],
            "files": [{"what": what, "where": where} for what, where in self.files],
            "server": list(self.server),
            "push_dataset": self.push_dataset,
            "job": json.loads(self.job.to_json()),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class TargetSize:
    hidden_size: int
    num_layers: int


def make_plan(
    *,
    container: str,
    job: TrainingJob,
    shape: ResolvedShape,
    dataset: DatasetInfo,
    facts: ContainerFacts,
    target: TargetSize,
    out_dir: Path,
    evaluate: bool = False,
    promote: bool = False,
) -> TrainPlan:
    """What the run will do, from what the container holds (raises when it must not go on)."""
    run = facts.run
    if run.running:
        stage, pid = next(iter(run.running.items()))
        raise TrainingPlanError(
            f"the {stage} stage of run {job.name} is still running in {container} (pid {pid})",
            hint="wait for it to finish, or stop it (kill the pid) and run again to continue",
        )
    rerun = _compare_jobs(run.job_text, job) if run.job_text else set()
    _check_dataset(dataset, facts, job)
    sizes = _sizes(job, shape, dataset, target)
    stages = tuple(
        _stage_plan(stage, job, facts, rerun=rerun, sizes=sizes, target=target) for stage in STAGES
    )
    return TrainPlan(
        container=container,
        run=job.name,
        folder=job.folder,
        job=job,
        shape=shape,
        dataset=dataset,
        stages=stages,
        sizes=sizes,
        files=_files(job, out_dir),
        server=_server_steps(stages, facts, evaluate=evaluate, promote=promote),
        push_dataset=dataset.source == "local" and run.dataset_sha256 != dataset.sha256,
        notes=tuple(
            f"{key} changed since the last run: train and export run again" for key in sorted(rerun)
        ),
    )


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flat(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): data}


def _compare_jobs(old_text: str, new: TrainingJob) -> set[str]:
    """The train settings that changed; any other change is an error naming its keys."""
    try:
        old = _flat(json.loads(old_text))
    except ValueError:
        raise TrainingPlanError(
            f"{new.paths.job} in the container is not a job file",
            hint=f"remove {new.folder} to start over",
        ) from None
    fresh = _flat(json.loads(new.to_json()))
    changed = {
        key
        for key in set(old) | set(fresh)
        if key not in _VOLATILE and old.get(key) != fresh.get(key)
    }
    fixed = sorted(key for key in changed if not key.startswith("train."))
    if fixed:
        shown = ", ".join(f"{key} {old.get(key)!r} -> {fresh.get(key)!r}" for key in fixed[:4])
        raise TrainingPlanError(
            f"run {new.name} in the container was started with other settings ({shown})",
            hint="set train.name in the playbook to start a new run, or remove "
            f"{new.folder} in the container to start this one over",
        )
    return changed


def _check_dataset(dataset: DatasetInfo, facts: ContainerFacts, job: TrainingJob) -> None:
    """A local dataset that differs from the one pushed earlier would mix two datasets."""
    run = facts.run
    pushed = run.dataset_sha256
    started = bool(run.done) or run.regenerated_samples > 0
    if dataset.source == "local" and pushed and pushed != dataset.sha256 and started:
        raise TrainingPlanError(
            f"{dataset.path} differs from the dataset run {job.name} was started with "
            f"(sha256 {pushed[:12]}… in the container)",
            hint="set train.name in the playbook to start a new run, or remove "
            f"{job.folder} in the container to start this one over",
        )


def _sizes(
    job: TrainingJob, shape: ResolvedShape, dataset: DatasetInfo, target: TargetSize
) -> dict[str, int]:
    prompt_tokens = dataset.bytes / max(dataset.lines, 1) / BYTES_PER_TOKEN
    per_sample = min(job.train.seq_len, math.ceil(prompt_tokens + job.data.max_tokens))
    tokens = dataset.samples * per_sample
    # the prepared data holds every target layer the drafter reads plus the last hidden state
    layers = len(shape.target_layer_ids.value) + 1
    steps = job.train.max_steps or job.train.epochs * math.ceil(tokens / job.train.seq_len)
    return {
        "samples": dataset.samples,
        "answer_tokens_max": dataset.samples * job.data.max_tokens,
        "tokens_per_sample_max": per_sample,
        "hidden_state_bytes": tokens * target.hidden_size * layers * FLOAT32,
        "train_steps": steps,
    }


def _stage_plan(
    stage: Stage,
    job: TrainingJob,
    facts: ContainerFacts,
    *,
    rerun: set[str],
    sizes: dict[str, int],
    target: TargetSize,
) -> StagePlan:
    run = facts.run
    estimate = _estimate(stage, job, sizes, target)
    if stage in ("train", "export") and rerun:
        return StagePlan(stage, "rerun", "the train settings changed", estimate)
    record = run.done.get(stage)
    if record is not None:
        return StagePlan(stage, "done", _done_detail(record), 0.0)
    if stage == "data" and run.regenerated_samples:
        left = max(sizes["samples"] - run.regenerated_samples, 0)
        detail = f"{run.regenerated_samples} of {sizes['samples']} samples already regenerated"
        return StagePlan(stage, "resume", detail, estimate * left / max(sizes["samples"], 1))
    if stage == "train" and run.checkpoints:
        return StagePlan(stage, "resume", f"from checkpoint {run.checkpoints[-1]}", estimate)
    return StagePlan(stage, "run", _todo_detail(stage, job, sizes), estimate)


def _done_detail(record: dict[str, Any]) -> str:
    summary = record.get("summary")
    seconds = record.get("seconds")
    took = f" in {seconds} s" if isinstance(seconds, int | float) else ""
    if isinstance(summary, dict) and summary:
        scalars = [(k, v) for k, v in summary.items() if not isinstance(v, dict | list)]
        shown = ", ".join(f"{k} {v}" for k, v in scalars[:3])
        return f"finished{took}" + (f": {shown}" if shown else "")
    return f"finished{took}"


def _todo_detail(stage: Stage, job: TrainingJob, sizes: dict[str, int]) -> str:
    if stage == "data":
        thinking = {None: "template default", True: "on", False: "off"}[job.data.thinking]
        return (
            f"{sizes['samples']} samples answered by {job.data.served_model} "
            f"(temperature {job.data.temperature:g}, thinking {thinking}, "
            f"≤ {job.data.max_tokens} tokens, {job.data.concurrency} at a time)"
        )
    if stage == "prepare":
        return (
            f"tokens and hidden states of the target ({human_bytes(sizes['hidden_state_bytes'])})"
        )
    if stage == "train":
        every = job.train.checkpoint_every
        return f"~{sizes['train_steps']} steps with speculators, checkpoint every {every}"
    return "config.json + model.safetensors, then drafter check against the target"


def _estimate(stage: Stage, job: TrainingJob, sizes: dict[str, int], target: TargetSize) -> float:
    scale = target.hidden_size / LAB_HIDDEN * target.num_layers / 4
    if stage == "data":
        streams = min(job.data.concurrency, max(sizes["samples"], 1))
        return START_S + sizes["answer_tokens_max"] / (LAB_DECODE_TOK_S * streams) * max(scale, 1)
    if stage == "prepare":
        tokens = sizes["samples"] * sizes["tokens_per_sample_max"]
        return START_S + tokens / LAB_PREPARE_TOK_S * max(scale, 1)
    if stage == "train":
        return START_S + sizes["train_steps"] * LAB_STEP_S * max(scale, 1)
    return START_S


def _files(job: TrainingJob, out_dir: Path) -> tuple[tuple[str, str], ...]:
    paths = job.paths
    return (
        ("run folder", paths.root),
        ("job", paths.job),
        ("dataset", job.dataset),
        ("regenerated answers", paths.regenerated),
        ("prepared data", paths.prepared),
        ("checkpoints", paths.checkpoints),
        ("loss per step", paths.metrics),
        ("drafter export", paths.export),
        ("provenance", paths.provenance),
        ("stage logs", f"{paths.root}/logs/<stage>.log"),
        ("here: provenance, loss curve, report", str(out_dir)),
    )


def _server_steps(
    stages: tuple[StagePlan, ...], facts: ContainerFacts, *, evaluate: bool, promote: bool
) -> tuple[str, ...]:
    todo = [s.stage for s in stages if s.status != "done"]
    steps: list[str] = []
    running = facts.server_running
    if "data" in todo and not running:
        steps.append(
            "start the deployed server for the data stage"
            if facts.manifest
            else "launch the playbook for the data stage"
        )
        running = True
    elif "data" in todo:
        steps.append("the data stage uses the running server")
    gpu = [stage for stage in todo if stage in GPU_STAGES]
    if gpu and running:
        steps.append(f"stop the server before {gpu[0]}: training needs its GPUs")
    if evaluate:
        steps.append("evaluate: bench the drafter it replaces, launch the new one, bench it")
    if promote:
        steps.append("promote: write the new playbook and launch it")
    elif evaluate or (gpu and facts.server_running):
        steps.append("restart the previous server")
    return tuple(steps)


def human_bytes(size: float) -> str:
    """``1.5 GiB`` and the like, for tables."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"
