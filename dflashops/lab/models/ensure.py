"""Build the lab models with the vLLM runtime's interpreter, unless a finished build is there.

This side runs in dflashops' own interpreter (standard library only); the build itself runs as
``<vllm venv>/bin/python -m dflashops.lab.models`` because it needs torch and transformers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from dflashops.errors import LabError, tail_lines
from dflashops.lab.models.layout import LabModels, default_models_dir
from dflashops.lab.runtime import VllmRuntime
from dflashops.progress import Say, quiet

BUILD_TIMEOUT_S = 600


def ensure_lab_models(
    runtime: VllmRuntime,
    out: Path | None = None,
    *,
    seed: int = 0,
    force: bool = False,
    progress: Say | None = None,
) -> tuple[LabModels, bool]:
    """The lab models in ``out`` (default: the cache), and whether they were built just now.

    The build goes to a sibling folder first and replaces ``out`` only when it finished, so a
    reader (a running server, a test) never sees half a build.
    """
    models = LabModels((out or default_models_dir()).expanduser().resolve())
    if not force and models.is_complete(seed):
        return models, False
    say = progress or quiet
    models.root.parent.mkdir(parents=True, exist_ok=True)
    staging = models.root.with_name(f".{models.root.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        run_builder(runtime, staging, seed=seed, progress=say)
        if not LabModels(staging).is_complete(seed):
            raise LabError(f"the model build in {staging} finished without a valid manifest")
        _swap_in(staging, models.root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return models, True


def run_builder(runtime: VllmRuntime, out: Path, *, seed: int, progress: Say) -> None:
    """Run ``python -m dflashops.lab.models OUT`` in the runtime; relay its progress lines."""
    argv = [str(runtime.python), "-m", "dflashops.lab.models", str(out), "--seed", str(seed)]
    try:
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=runtime.env({"PYTHONWARNINGS": "ignore"}),
        )
    except OSError as exc:
        raise LabError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
    assert proc.stdout is not None
    for line in proc.stdout:
        try:
            message = json.loads(line).get("message")
        except (ValueError, AttributeError):
            message = None
        if message:
            progress(str(message))
    try:
        _, stderr = proc.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise LabError(f"the model build did not finish within {BUILD_TIMEOUT_S}s") from exc
    if proc.returncode != 0:
        raise LabError(
            f"the model build failed (exit {proc.returncode}): {tail_lines(stderr, 3)}",
            hint="run `dflashops lab models --force`; see the traceback with --debug",
        )


def _swap_in(staging: Path, final: Path) -> None:
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)
