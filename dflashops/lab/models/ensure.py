"""Build the lab models with the vLLM runtime's interpreter, unless a finished build is there.

This side runs in dflashops' own interpreter (standard library only); the build itself runs as
``<vllm venv>/bin/python -m dflashops.lab.models`` because it needs torch, transformers,
``speculators`` and vLLM (it trains the target, then serves it to train the DFlash drafter).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from dflashops.errors import tail_lines
from dflashops.lab.errors import LabError
from dflashops.lab.models.layout import LabModels, default_models_dir
from dflashops.lab.runtime import VllmRuntime
from dflashops.progress import Say, quiet

# The build takes about 5 minutes on 2 cores (target ~1, drafter data ~1, drafter training ~3);
# its vLLM server may first wait up to 10 minutes for the machine's vLLM slot (serve.SLOT_WAIT_S).
BUILD_TIMEOUT_S = 1500
STOP_GRACE_S = 60


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
        say(f"building the lab models into {models.root} (about 5 minutes on 2 cores)")
        run_builder(runtime, staging, seed=seed, progress=say)
        if not LabModels(staging).is_complete(seed):
            raise LabError(f"the model build in {staging} finished without a valid manifest")
        _swap_in(staging, models.root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return models, True


def run_builder(
    runtime: VllmRuntime,
    out: Path,
    *,
    seed: int,
    progress: Say,
    without_dflash: bool = False,
    timeout_s: float = BUILD_TIMEOUT_S,
) -> None:
    """Run ``python -m dflashops.lab.models OUT`` in the runtime; relay its progress lines.

    ``without_dflash`` builds the deterministic part only (no drafter, no manifest)."""
    argv = [str(runtime.python), "-m", "dflashops.lab.models", str(out), "--seed", str(seed)]
    if without_dflash:
        argv.append("--without-dflash")
    # stderr to a file, not a pipe: the libraries the build drives log a lot there, and a full
    # pipe nobody reads while stdout is relayed would stall the build
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=runtime.env({"PYTHONWARNINGS": "ignore"}),
            )
        except OSError as exc:
            raise LabError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        # the relay loop blocks on the build's stdout: a timer ends a build that hangs
        timed_out = threading.Event()

        def give_up() -> None:
            # SIGTERM first: the build stops the vLLM server it started (its own process
            # group, which a SIGKILL of the build would orphan) before it exits
            timed_out.set()
            proc.terminate()
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()

        watchdog = threading.Timer(timeout_s, give_up)
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                _relay(line, progress)
            code = proc.wait()
        finally:
            watchdog.cancel()
        stderr.seek(0)
        errors = stderr.read()
    if timed_out.is_set():
        raise LabError(f"the model build did not finish within {timeout_s:.0f}s")
    if code != 0:
        raise LabError(
            f"the model build failed (exit {code}): {tail_lines(errors, 3)}",
            hint="run `dflashops lab models --force`; see the traceback with --debug",
        )


def _relay(line: str, progress: Say) -> None:
    try:
        message = json.loads(line).get("message")
    except (ValueError, AttributeError):
        message = None
    if message:
        progress(str(message))


def _swap_in(staging: Path, final: Path) -> None:
    old = final.with_name(f".{final.name}.old-{os.getpid()}")
    if final.exists():
        final.rename(old)
    staging.rename(final)
    shutil.rmtree(old, ignore_errors=True)
