"""The trained target served by the lab's vLLM runtime while the drafter's data stage asks it.

The lab builds its DFlash drafter as ``drafter train`` does in a container, and the data stage
needs the target's own answers from a running server: here one that the build starts itself,
outside any container (so building the models needs no lab), with no speculation, on loopback.

This machine runs at most one vLLM server at a time (2 cores, ~3 GiB each): the server holds
the machine-wide slot file that the test suite's servers hold too (``DFLASHOPS_VLLM_SLOT``,
default ``/tmp/dflashops-vllm.slot``, an exclusive ``flock``), waiting a bounded time for it.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dflashops.errors import tail_lines
from dflashops.lab.errors import LabError
from dflashops.lab.runtime import VllmRuntime, lab_server_spec
from dflashops.progress import Say, quiet

SLOT_FILE_ENV = "DFLASHOPS_VLLM_SLOT"
SLOT_FILE = "/tmp/dflashops-vllm.slot"
SLOT_WAIT_S = 600.0
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 30.0
SERVED_NAME = "tiny"
# long enough for a training prompt and its answer (the data stage's max_tokens)
MAX_MODEL_LEN = 512


def slot_file() -> Path:
    return Path(os.environ.get(SLOT_FILE_ENV, SLOT_FILE))


@contextmanager
def machine_slot(wait_s: float = SLOT_WAIT_S, say: Say = quiet) -> Iterator[None]:
    """Hold the machine-wide vLLM slot; wait for it at most ``wait_s`` seconds."""
    path = slot_file()
    with path.open("a+") as handle:
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LabError(
                        f"another vLLM server held {path} for {wait_s:.0f}s",
                        hint="stop the other server (a test run, `lab up`) and build again",
                    ) from None
                if not told:
                    say(f"waiting for the machine's vLLM slot ({path}): another server runs")
                    told = True
                time.sleep(1.0)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def serve_target(
    runtime: VllmRuntime, target: Path, run_dir: Path, say: Say = quiet
) -> Iterator[str]:
    """Serve ``target`` (no speculation) while the block runs; yield its base URL (``…/v1``)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    spec = lab_server_spec(
        runtime,
        target,
        port=port,
        served_model_name=SERVED_NAME,
        max_model_len=MAX_MODEL_LEN,
        run_dir=run_dir,
    )
    log_path = run_dir / "server.log"
    with machine_slot(say=say):
        say(f"starting vLLM with the target on 127.0.0.1:{port} (no speculation)")
        started = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                spec.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=runtime.env(spec.env),
                start_new_session=True,  # its own process group: stopped as one
                cwd=run_dir,
            )
        try:
            _wait_healthy(process, port, log_path)
            say(f"vLLM ready in {time.monotonic() - started:.0f}s")
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            _stop(process)
            say("vLLM stopped")


def _wait_healthy(process: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise LabError(
                f"vLLM serving the lab target exited {code} before it was ready: "
                + tail_lines(_read(log_path), 3),
                hint=f"the whole log: {log_path}",
            )
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1.0)
    raise LabError(
        f"vLLM serving the lab target was not ready within {START_TIMEOUT_S:.0f}s: "
        + tail_lines(_read(log_path), 3),
        hint=f"the whole log: {log_path}",
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after a bounded wait."""
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            process.poll()  # reap, or the zombie keeps the group alive
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
