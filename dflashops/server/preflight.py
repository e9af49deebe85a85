"""Preflight of one engine launch: files, drafter config, /dev/shm, GPUs and peer access.

Standard library only, plus torch when the spec expects CUDA (imported lazily, so a host without
GPUs never pays for it) and the drafter validator from :mod:`dflashops.drafter` when it is
installed. Checks run cheapest first and stop at the first failure, so a bad setup fails in
seconds, before the engine spends a minute importing itself. Over 400 lines because every step
a start runs before exec is here, in the order it runs: one file says what a start checks.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dflashops.server.spec import ServerSpec

SHM_PATH = "/dev/shm"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class ExitCode:
    """Distinct exit codes of ``python -m dflashops.server``, one per kind of failure."""

    OK = 0
    USAGE = 2
    SPEC = 10
    MODEL = 11
    DRAFTER_FILES = 12
    DRAFTER_CONFIG = 13
    GPU = 14
    GPU_MEMORY = 15
    SHM = 16
    ENGINE = 17
    COLLECTIVE = 18


class PreflightFailure(Exception):
    """One check failed; ``message`` is the one line printed on stderr."""

    def __init__(self, check: str, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.check = check
        self.message = message
        self.exit_code = exit_code


@dataclass
class CheckOutcome:
    name: str
    ok: bool
    detail: str


@dataclass
class GpuInfo:
    index: int
    name: str
    free_bytes: int
    total_bytes: int


@dataclass
class PeerAccess:
    a: int
    b: int
    ok: bool


@dataclass
class PreflightReport:
    """What preflight found. Written as JSON to ``spec.preflight_report`` (launch reads
    ``nccl_p2p_disable`` and ``exec_env`` from it)."""

    engine: str
    engine_version: str
    ok: bool = True
    failed_check: str | None = None
    message: str | None = None
    exit_code: int = ExitCode.OK
    checks: list[CheckOutcome] = field(default_factory=list)
    shm: dict[str, Any] | None = None
    torch_version: str | None = None
    gpus: list[GpuInfo] | None = None
    peer_access: list[PeerAccess] | None = None
    nccl_p2p_disable: bool = False
    drafter_validation: dict[str, Any] | None = None
    # the opt-in all-reduce across the TP GPUs (dflashops.server.collective), when it ran
    collective: dict[str, Any] | None = None
    # variables preflight adds to the engine's environment (NCCL_P2P_DISABLE, drafter needs)
    exec_env: dict[str, str] = field(default_factory=dict)
    duration_s: float = 0.0

    def passed(self, name: str, detail: str) -> None:
        self.checks.append(CheckOutcome(name, True, detail))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"


def run_preflight(spec: ServerSpec, environ: dict[str, str] | None = None) -> PreflightReport:
    """Run every check (stopping at the first failure) and return the report.

    ``environ`` is the environment the engine will get (default: ``os.environ``); it is where
    ``argv[0]`` is looked up and whether NCCL_P2P_DISABLE is already set.
    """
    env = dict(os.environ if environ is None else environ)
    report = PreflightReport(engine=spec.engine, engine_version=spec.engine_version)
    started = time.monotonic()
    checks: list[Callable[[ServerSpec, PreflightReport, dict[str, str]], None]] = [
        check_engine,
        check_model,
        check_drafter,
        check_drafter_view,
        check_shm,
        check_gpus,
        check_collective,
    ]
    try:
        for check in checks:
            check(spec, report, env)
    except PreflightFailure as failure:
        report.ok = False
        report.failed_check = failure.check
        report.message = failure.message
        report.exit_code = failure.exit_code
        report.checks.append(CheckOutcome(failure.check, False, failure.message))
    report.duration_s = round(time.monotonic() - started, 3)
    return report


def check_engine(spec: ServerSpec, report: PreflightReport, env: dict[str, str]) -> None:
    import shutil

    program = spec.argv[0]
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise PreflightFailure(
            "engine",
            f"{spec.engine} executable {program!r} not found (PATH or path in argv[0])",
            ExitCode.ENGINE,
        )
    report.passed("engine", found)


def _model_problem(path: Path, what: str) -> str | None:
    """Why ``path`` is not a loadable model folder, or None."""
    if not path.is_dir():
        return f"{what} folder {path} does not exist"
    config = path / "config.json"
    if not config.is_file():
        return f"{what} {path} has no config.json"
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"{what} {config} is not valid JSON ({exc})"
    if not isinstance(data, dict):
        return f"{what} {config} is not a JSON object"
    for index_name in INDEX_FILES:
        index = path / index_name
        if index.is_file():
            return _missing_shards(index, what)
    if not any(p.suffix in WEIGHT_SUFFIXES and p.is_file() for p in path.iterdir()):
        return f"{what} {path} has no weights (*.safetensors or *.bin)"
    return None


def _missing_shards(index: Path, what: str) -> str | None:
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"{what} {index} is unreadable ({exc})"
    missing = [s for s in shards if not (index.parent / s).is_file()]
    if missing:
        return f"{what} {index.parent} lacks {len(missing)} weight shard(s), first {missing[0]}"
    return None


def check_model(spec: ServerSpec, report: PreflightReport, env: dict[str, str]) -> None:
    if not spec.check_files:
        report.passed("model", "not checked (check_files is false)")
        return
    problem = _model_problem(Path(spec.model), "model")
    if problem:
        raise PreflightFailure("model", problem, ExitCode.MODEL)
    report.passed("model", spec.model)


# the methods whose drafter files the preflight checks by their family's rules (MTP's "drafter"
# is the target itself: render names its folder); n-gram and suffix have no files
CHECKED_METHODS = frozenset({"dflash", "dspark", "eagle3", "eagle", "draft_model", "mtp"})


def check_drafter(spec: ServerSpec, report: PreflightReport, env: dict[str, str]) -> None:
    if not spec.needs_drafter_files() or spec.drafter is None:
        report.passed("drafter", f"no drafter files for method {spec.method or 'none'}")
        return
    if spec.check_files:
        problem = _model_problem(Path(spec.drafter), "drafter")
        if problem:
            raise PreflightFailure("drafter", problem, ExitCode.DRAFTER_FILES)
    report.passed("drafter", spec.drafter)
    if spec.method not in CHECKED_METHODS:
        return
    validation = validate_drafter_hook(spec)
    report.drafter_validation = validation
    if validation["status"] == "errors":
        first = validation["findings"][0] if validation["findings"] else {}
        detail = first.get("message") or validation.get("message") or "errors found"
        raise PreflightFailure(
            "drafter-config",
            f"drafter {spec.drafter} config is invalid: {detail} "
            f"(run `dflashops drafter check` for all findings)",
            ExitCode.DRAFTER_CONFIG,
        )
    for key, value in validation.get("required_env", {}).items():
        if key not in spec.env and key not in env:
            report.exec_env[key] = value
    report.passed("drafter-config", validation["status"])


def check_drafter_view(spec: ServerSpec, report: PreflightReport, env: dict[str, str]) -> None:
    """Write the z-lab view SGLang reads of a speculators-layout drafter (spec.drafter_view)."""
    if spec.drafter_view is None or spec.drafter is None:
        return
    from dflashops.server.drafter_view import ViewError, write_view

    try:
        written = write_view(Path(spec.drafter), Path(spec.drafter_view), Path(spec.model))
    except ViewError as exc:
        raise PreflightFailure("drafter-view", str(exc), ExitCode.DRAFTER_FILES) from exc
    report.passed("drafter-view", written)


def validate_drafter_hook(spec: ServerSpec) -> dict[str, Any]:
    """Run what ``dflashops drafter check`` runs on the spec's drafter, target and engine.

    Returns ``{"status": clean|warnings|errors|unavailable, "findings": [...],
    "required_env": {...}}``. When the validator is not installed (a partial dflashops) or
    itself breaks, the launch goes on and the report says ``unavailable`` and why; unreadable
    drafter files are ``errors``.
    """
    try:
        from dflashops.drafter.check import check_paths
        from dflashops.drafter.engine import parse_engine
        from dflashops.errors import DflashopsError
    except ImportError as exc:
        return _unavailable(f"drafter validator not installed ({exc})")
    assert spec.drafter is not None
    try:
        engine = parse_engine(f"{spec.engine}=={spec.engine_version}")
        run = check_paths(
            spec.drafter,
            target=spec.model if spec.check_files else None,
            ref=spec.drafter_ref,
            engine=engine,
            k=spec.num_speculative_tokens,
            method=spec.method,
        )
    except DflashopsError as exc:
        return {
            "status": "errors",
            "message": exc.one_line(),
            "findings": [],
            "required_env": {},
        }
    except Exception as exc:  # a validator bug must not keep a good server down
        return _unavailable(f"drafter validator failed: {type(exc).__name__}: {exc}")
    return _validation_dict(run.result)


def _unavailable(message: str) -> dict[str, Any]:
    return {"status": "unavailable", "message": message, "findings": [], "required_env": {}}


def _validation_dict(result: Any) -> dict[str, Any]:
    findings = []
    for finding in getattr(result, "findings", ()):
        severity = str(getattr(finding, "severity", "error"))
        key = getattr(finding, "key", "?")
        expected, found = getattr(finding, "expected", "?"), getattr(finding, "found", "?")
        why = getattr(finding, "why", "")
        message = f"{key}: expected {expected}, found {found}"
        findings.append(
            {
                "severity": severity,
                "key": key,
                "expected": expected,
                "found": found,
                "message": f"{message} ({why})" if why else message,
            }
        )
    findings.sort(key=lambda f: {"error": 0, "warning": 1}.get(f["severity"], 2))
    summary = getattr(result, "summary", None)
    status = getattr(summary, "status", None)
    if status not in ("clean", "warnings", "errors"):
        severities = {f["severity"] for f in findings}
        status = "errors" if "error" in severities else "warnings" if severities else "clean"
    required_env = {str(k): str(v) for k, v in dict(getattr(result, "required_env", {})).items()}
    return {"status": status, "findings": findings, "required_env": required_env}


def check_shm(spec: ServerSpec, report: PreflightReport, env: dict[str, str]) -> None:
    try:
        stat = os.statvfs(SHM_PATH)
    except OSError as exc:
        if spec.min_shm_bytes:
            raise PreflightFailure(
                "shm", f"{SHM_PATH} is not available ({exc.strerror})", ExitCode.SHM
            ) from exc
        report.passed("shm", f"{SHM_PATH} not available, none required")
        return
    total, free = stat.f_frsize * stat.f_blocks, stat.f_frsize * stat.f_bavail
    report.shm = {"path": SHM_PATH, "total_bytes": total, "free_bytes": free}
    if total < spec.min_shm_bytes:
        raise PreflightFailure(
            "shm",
            f"{SHM_PATH} is {_gib(total)}, the spec needs at least {_gib(spec.min_shm_bytes)} "
            "(raise the container's /dev/shm size)",
            ExitCode.SHM,
        )
    report.passed("shm", f"{_gib(total)} total, {_gib(free)} free")


def check_gpus(spec: ServerSpec, report: PreflightReport, env: dict[str, str]) -> None:
    if not spec.expect_cuda:
        report.passed("gpus", "not checked (expect_cuda is false)")
        return
    try:
        torch = importlib.import_module("torch")
    except ImportError as exc:
        raise PreflightFailure(
            "gpus", f"torch is not importable in this interpreter ({exc})", ExitCode.GPU
        ) from exc
    report.torch_version = str(getattr(torch, "__version__", "?"))
    cuda = torch.cuda
    if not cuda.is_available():
        raise PreflightFailure(
            "gpus",
            f"CUDA is not available to torch {report.torch_version} "
            f"(CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', 'unset')}); "
            f"tensor_parallel_size {spec.tensor_parallel_size} needs GPUs",
            ExitCode.GPU,
        )
    count = int(cuda.device_count())
    gpus = []
    for index in range(count):
        free, total = cuda.mem_get_info(index)
        gpus.append(GpuInfo(index, str(cuda.get_device_name(index)), int(free), int(total)))
    report.gpus = gpus
    if count < spec.tensor_parallel_size:
        raise PreflightFailure(
            "gpus",
            f"{count} GPU(s) visible, tensor_parallel_size is {spec.tensor_parallel_size}",
            ExitCode.GPU,
        )
    used = gpus[: spec.tensor_parallel_size]
    short = [g for g in used if g.free_bytes < spec.min_free_gpu_bytes]
    if short:
        g = short[0]
        raise PreflightFailure(
            "gpu-memory",
            f"GPU {g.index} ({g.name}) has {_gib(g.free_bytes)} free, the spec needs "
            f"{_gib(spec.min_free_gpu_bytes)} (another process holds it?)",
            ExitCode.GPU_MEMORY,
        )
    report.passed("gpus", ", ".join(f"{g.index}:{g.name} {_gib(g.free_bytes)} free" for g in used))
    pairs = [
        PeerAccess(a, b, bool(cuda.can_device_access_peer(a, b)))
        for a in range(spec.tensor_parallel_size)
        for b in range(spec.tensor_parallel_size)
        if a != b
    ]
    report.peer_access = pairs
    missing = [p for p in pairs if not p.ok]
    report.nccl_p2p_disable = bool(missing)
    if missing and spec.auto_nccl_p2p and "NCCL_P2P_DISABLE" not in {**env, **spec.env}:
        report.exec_env["NCCL_P2P_DISABLE"] = "1"
    detail = "all pairs" if not missing else f"missing for {len(missing)} of {len(pairs)} pairs"
    report.passed("peer-access", detail if pairs else "single GPU")


def check_collective(spec: ServerSpec, report: PreflightReport, env: dict[str, str]) -> None:
    """The opt-in all-reduce across the TP GPUs, with the environment the engine will get
    (NCCL_P2P_DISABLE included when peer access was found missing)."""
    if not spec.collective_check:
        return
    if not spec.expect_cuda:
        report.passed("collective", "not checked (expect_cuda is false)")
        return
    from dflashops.server.collective import all_reduce_check

    result = all_reduce_check(
        spec.tensor_parallel_size, backend="nccl", environ={**env, **report.exec_env}
    )
    report.collective = result.to_dict()
    if not result.ok:
        raise PreflightFailure("collective", result.detail, ExitCode.COLLECTIVE)
    report.passed("collective", result.detail)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
