"""Commands the runtime install runs: each with a deadline, its output's tail in the error, and
pip's progress lines streamed to the spinner; and the ``vllm`` dist-info shim."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from dflashops.errors import tail_lines
from dflashops.lab.errors import LabError
from dflashops.progress import Say


def add_vllm_dist_shim(site_packages: Path, version: str) -> Path:
    """A minimal ``vllm`` distribution record so ``importlib.metadata.version("vllm")`` works."""
    dist = site_packages / f"vllm-{version}+cpu.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n", encoding="utf-8"
    )
    (dist / "RECORD").write_text("", encoding="utf-8")
    return dist


def base_python() -> str:
    """The interpreter to make the venv from (ours; ``venv`` resolves a venv to its base)."""
    return sys.executable or shutil.which("python3") or "python3"


def site_packages(python: Path) -> Path:
    out = run_logged(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        "locate site-packages",
        None,
        timeout=60,
    )
    return Path(out.strip())


def run_logged(
    argv: Sequence[str],
    what: str,
    say: Say | None,
    *,
    timeout: float,
    stream: bool = False,
    hint: str | None = None,
) -> str:
    """Run ``argv``; on failure raise LabError with the output's tail. Streams pip's
    ``Collecting``/``Installing`` lines to ``say`` when ``stream``."""
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
    except OSError as exc:
        raise LabError(f"{what}: cannot run {argv[0]}: {exc.strerror or exc}") from exc
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if stream and say and line.startswith(("Collecting ", "Installing ", "Successfully")):
            say(line.strip()[:120])
        if time.monotonic() > deadline:
            proc.kill()
            break
    try:
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    output = "".join(lines)
    if time.monotonic() > deadline:
        raise LabError(f"{what} did not finish within {timeout:.0f}s", hint=hint)
    if code != 0:
        detail = tail_lines(output, 3)
        hint_for = hint if "torch" in output and "ResolutionImpossible" in output else None
        raise LabError(f"{what} failed (exit {code}): {detail}", hint=hint_for)
    return output
