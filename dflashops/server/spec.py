"""The server spec: what ``python -m dflashops.server --spec FILE`` checks and then executes.

Standard library only: it is read inside an engine venv in a container. ``launch`` renders it
(``/etc/dflashops/server.json``) from the playbook; ``to_json`` / ``from_json`` round-trip it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

ENGINES = ("vllm", "sglang")
# Speculative methods whose drafter is a model folder (ngram and suffix need none).
DRAFTER_METHODS = ("dflash", "eagle", "eagle3", "draft_model", "mtp", "medusa", "mlp_speculator")
SPEC_VERSION = 1


class SpecError(ValueError):
    """The spec file is unreadable or does not describe a server."""


@dataclass
class ServerSpec:
    """One engine launch.

    ``argv`` is executed as is (``argv[0]`` is looked up on ``PATH`` of the final environment),
    so the spec stays engine-agnostic: the renderer puts ``--tensor-parallel-size`` and the
    speculative config into ``argv``; the named fields below are what preflight checks.
    """

    engine: str
    engine_version: str
    argv: list[str]
    model: str
    drafter: str | None = None
    method: str | None = None
    # the registry entry the drafter is checked against (the playbook's drafter.ref, when it
    # names a bundled entry): without it a target that two entries fit (Qwen3.5- and
    # Qwen3.6-27B share one architecture) leaves the check with no reference, and a guessed
    # config passes the host's preflight with warnings only
    drafter_ref: str | None = None
    # num_speculative_tokens the engine runs with (the drafter check compares it to block_size)
    num_speculative_tokens: int | None = None
    tensor_parallel_size: int = 1
    expect_cuda: bool = True
    min_shm_bytes: int = 0
    # refuse to start when a visible GPU has less free memory than this (0: only report)
    min_free_gpu_bytes: int = 0
    env: dict[str, str] = field(default_factory=dict)
    # where the JSON preflight report goes (written on success and on failure)
    preflight_report: str | None = None
    # written with the engine's pid just before exec (the pid survives the exec)
    pidfile: str | None = None
    # set NCCL_P2P_DISABLE=1 when some pair of TP GPUs lacks peer access (unless env sets it)
    auto_nccl_p2p: bool = True
    # a model given as a hub id instead of a folder cannot be checked on disk
    check_files: bool = True
    # opt-in: one all-reduce across the TP GPUs before the engine loads (server.collective)
    collective_check: bool = False
    # SGLang and a speculators-layout DFlash drafter: the folder where the server writes the
    # drafter's z-lab view before exec (argv names this folder, not ``drafter``)
    drafter_view: str | None = None
    spec_version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise SpecError("; ".join(problems))

    def problems(self) -> list[str]:
        found: list[str] = []
        if self.engine not in ENGINES:
            found.append(f"engine must be one of {', '.join(ENGINES)}, not {self.engine!r}")
        if not self.engine_version:
            found.append("engine_version is empty")
        if not self.argv or not all(isinstance(a, str) and a for a in self.argv):
            found.append("argv must be a non-empty list of non-empty strings")
        if not self.model:
            found.append("model is empty")
        if self.num_speculative_tokens is not None and self.num_speculative_tokens < 1:
            found.append("num_speculative_tokens must be at least 1")
        if self.tensor_parallel_size < 1:
            found.append("tensor_parallel_size must be at least 1")
        if self.min_shm_bytes < 0 or self.min_free_gpu_bytes < 0:
            found.append("byte limits must not be negative")
        if self.method in DRAFTER_METHODS and not self.drafter:
            found.append(f"method {self.method!r} needs a drafter path")
        if self.drafter_view is not None and not (
            self.drafter and self.drafter_view.startswith("/")
        ):
            found.append("drafter_view needs a drafter and must be an absolute path")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in self.env.items()):
            found.append("env must map strings to strings")
        if self.spec_version != SPEC_VERSION:
            found.append(f"spec_version {self.spec_version} is not {SPEC_VERSION}")
        return found

    @classmethod
    def from_dict(cls, data: Any) -> ServerSpec:
        if not isinstance(data, dict):
            raise SpecError("the spec must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown spec keys: {', '.join(unknown)}")
        missing = sorted(f.name for f in fields(cls) if f.name not in data and _is_required(f.name))
        if missing:
            raise SpecError(f"missing spec keys: {', '.join(missing)}")
        _check_types(data)
        try:
            return cls(**data)
        except TypeError as exc:
            raise SpecError(str(exc)) from exc

    @classmethod
    def from_json(cls, text: str) -> ServerSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise SpecError(f"not JSON: {exc}") from exc
        except RecursionError as exc:
            raise SpecError("not JSON a server reads: nested too deep") from exc
        return cls.from_dict(data)

    @classmethod
    def from_file(cls, path: str | Path) -> ServerSpec:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise SpecError(f"cannot read {path}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise SpecError(f"{path} is not UTF-8 text (byte {exc.start})") from exc
        return cls.from_json(text)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        # keys added after a spec version shipped are written only when set: a deployed
        # server.json then stays byte-identical across a dflashops upgrade (no restart for it)
        for key, default in _ADDED_LATER.items():
            if data.get(key) == default:
                del data[key]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def needs_drafter_files(self) -> bool:
        return bool(self.drafter) and self.method != "ngram"


_REQUIRED = ("engine", "engine_version", "argv", "model")
_ADDED_LATER: dict[str, Any] = {
    "collective_check": False,
    "drafter_ref": None,
    "drafter_view": None,
}
_TYPES: dict[str, tuple[type, ...]] = {
    "engine": (str,),
    "engine_version": (str,),
    "argv": (list,),
    "model": (str,),
    "drafter": (str, type(None)),
    "method": (str, type(None)),
    "drafter_ref": (str, type(None)),
    "num_speculative_tokens": (int, type(None)),
    "tensor_parallel_size": (int,),
    "expect_cuda": (bool,),
    "min_shm_bytes": (int,),
    "min_free_gpu_bytes": (int,),
    "env": (dict,),
    "preflight_report": (str, type(None)),
    "pidfile": (str, type(None)),
    "auto_nccl_p2p": (bool,),
    "check_files": (bool,),
    "collective_check": (bool,),
    "drafter_view": (str, type(None)),
    "spec_version": (int,),
}


def _is_required(name: str) -> bool:
    return name in _REQUIRED


def _check_types(data: dict[str, Any]) -> None:
    for key, value in data.items():
        allowed = _TYPES[key]
        # bool is an int: a count given as true/false is a mistake
        wrong_bool = isinstance(value, bool) and bool not in allowed
        if wrong_bool or not isinstance(value, allowed):
            names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
            raise SpecError(f"{key} must be {names}, not {type(value).__name__}")
