"""One training run, as the container's side reads it: the job file and the folder it fills.

``drafter train`` writes ``job.json`` into the run's folder in the container and then runs each
stage there as ``<engine venv>/bin/python -m dflashops.training STAGE --job <folder>/job.json``.
The lab builds its drafter with the same stages on this machine. Standard library only: this
module is imported in the engine venv (next to torch and ``speculators``) and by the CLI.

The folder (``Layout.training_run(name)`` in a container)::

    job.json                    this job
    dataset.jsonl               the prompts, pushed from the operator's machine (or a path there)
    data/regenerated.jsonl      the data stage: the target's own conversations (resumable)
    data/prepared/              the prepare stage: tokens, loss masks and hidden states, in the
                                format ``speculators``' offline data generation writes
    checkpoints/                the train stage: ``speculators`` checkpoints (resume from last)
    metrics.jsonl               one line per logged train step: {"step", "epoch", "loss", ...}
    export/                     the export stage: config.json + model.safetensors for the engine
    provenance.json             what the export was trained on, with library versions
    stages/<stage>.json         written when a stage finished, with its summary
    logs/<stage>.log            each stage's full output
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

Stage = Literal["data", "prepare", "train", "export"]
STAGES: tuple[Stage, ...] = ("data", "prepare", "train", "export")
# Stages that need the target's GPUs to themselves: the server is stopped before the first.
GPU_STAGES: frozenset[Stage] = frozenset({"prepare", "train"})
LayerType = Literal["sliding_attention", "full_attention"]


@dataclass(frozen=True)
class DataSettings:
    """The data stage: how the served target writes the answers the drafter learns."""

    base_url: str  # the server as seen from where the stage runs (the container: loopback)
    served_model: str
    # the env var holding the server's API key; the stage runs with the container's secrets.env
    # sourced, as the server does, so the key never appears in a command line or the job file
    api_key_env: str | None = None
    temperature: float = 0.0
    thinking: bool | None = None  # chat_template_kwargs.enable_thinking; None = template default
    max_tokens: int = 512
    concurrency: int = 8
    max_samples: int | None = None


@dataclass(frozen=True)
class DrafterShape:
    """The drafter to train; DFlash semantics (0-based target layers, vLLM adds 1)."""

    num_layers: int
    block_size: int
    target_layer_ids: tuple[int, ...]
    mask_token_id: int
    layer_types: LayerType = "sliding_attention"  # one kind for all layers


@dataclass(frozen=True)
class TrainSettings:
    """The train stage, run through ``speculators``' trainer."""

    epochs: int = 1
    max_steps: int | None = None  # stop after this many optimizer steps (None: all epochs)
    lr: float = 3e-4
    seq_len: int = 2048  # packed sequence length per batch
    max_anchors: int = 512
    checkpoint_every: int = 100  # steps between checkpoints (the last step always saves)
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"


@dataclass(frozen=True)
class TrainingJob:
    """Everything the stages need; written once per run as ``job.json``."""

    name: str
    folder: str
    target: str  # the target model's directory (the one the server serves)
    dataset: str  # JSONL of prompts or conversations
    data: DataSettings
    drafter: DrafterShape
    train: TrainSettings = field(default_factory=TrainSettings)

    @property
    def paths(self) -> TrainingFolder:
        return TrainingFolder(self.folder)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> TrainingJob:
        raw = json.loads(text)
        return cls(
            name=raw["name"],
            folder=raw["folder"],
            target=raw["target"],
            dataset=raw["dataset"],
            data=_build(DataSettings, raw["data"]),
            drafter=_build(
                DrafterShape,
                {**raw["drafter"], "target_layer_ids": tuple(raw["drafter"]["target_layer_ids"])},
            ),
            train=_build(TrainSettings, raw.get("train", {})),
        )


def _build(kind: Any, raw: dict[str, Any]) -> Any:
    known = {f.name for f in fields(kind)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"{kind.__name__}: unknown keys {unknown}")
    return kind(**raw)


@dataclass(frozen=True)
class TrainingFolder:
    """The paths of one run's folder (POSIX: the same names in a container and here)."""

    root: str

    def _join(self, *parts: str) -> str:
        return posixpath.join(self.root, *parts)

    @property
    def job(self) -> str:
        return self._join("job.json")

    @property
    def dataset(self) -> str:
        return self._join("dataset.jsonl")

    @property
    def regenerated(self) -> str:
        return self._join("data", "regenerated.jsonl")

    @property
    def prepared(self) -> str:
        return self._join("data", "prepared")

    @property
    def checkpoints(self) -> str:
        return self._join("checkpoints")

    @property
    def metrics(self) -> str:
        return self._join("metrics.jsonl")

    @property
    def export(self) -> str:
        return self._join("export")

    @property
    def provenance(self) -> str:
        return self._join("provenance.json")

    def stage_done(self, stage: Stage) -> str:
        return self._join("stages", f"{stage}.json")

    def log(self, stage: Stage) -> str:
        return self._join("logs", f"{stage}.log")
