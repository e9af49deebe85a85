"""Real vLLM CPU servers for tests.

A pytest plugin: ``pytest_plugins = ["tests.support.vllm_servers"]``.

* ``vllm_runtime``: the lab's vLLM CPU venv (``dflashops lab models`` installs it).
* ``lab_models``: the cached build of the lab models (``ensure_lab_models``: built once, ~5 min,
  where the cache lacks a current build; CI builds it in setup), or the finished build that
  ``DFLASHOPS_LAB_MODELS`` names.
* ``dflash_server``, ``ngram_server``, ``decay_server``: a server with that speculative method;
  ``guessed_server``: DFlash with the trained drafter's guessed-config copy (the incident),
  started as ``launch --force`` starts it (the preflight does not validate the drafter config).

Only ONE server runs at a time (2 cores, ~3.2 GiB each): asking for another kind stops the
running one, so group tests by server kind. Servers start through the bundled
``python -m dflashops.server --spec`` (so its preflight and exec are exercised), with
``--enforce-eager`` and ``VLLM_LOG_STATS_INTERVAL=1``, on 127.0.0.1 and a free port; they are
stopped by pidfile (SIGTERM to the process group, then SIGKILL).

Without the runtime the fixtures skip, saying why; with ``DFLASHOPS_NEED_VLLM`` set (CI) they
fail instead.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dflashops.lab.models.ensure import ensure_lab_models
from dflashops.lab.models.layout import LabModels
from dflashops.lab.runtime import VllmRuntime, find_runtime, lab_server_spec
from dflashops.server.spec import ServerSpec
from tests.support.vllm_slot import VllmSlot, yields_slot

NEED_VLLM_ENV = "DFLASHOPS_NEED_VLLM"
LAB_MODELS_ENV = "DFLASHOPS_LAB_MODELS"
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0
NUM_SPECULATIVE_TOKENS = 4
MODEL_NAME = "tiny"


def runtime_or_skip() -> VllmRuntime:
    """The installed runtime; skip (or fail when ``DFLASHOPS_NEED_VLLM`` is set) without it."""
    runtime = find_runtime()
    if runtime is not None:
        return runtime
    reason = "the vLLM CPU runtime is not installed (run `dflashops lab models`, ~3 min, 3.5 GB)"
    if os.environ.get(NEED_VLLM_ENV):
        pytest.fail(f"{reason}; {NEED_VLLM_ENV} is set, so this is an error", pytrace=False)
    pytest.skip(f"{reason}; set {NEED_VLLM_ENV}=1 to fail instead of skipping")


@dataclass
class VllmServer:
    """A running server and where its traces are."""

    kind: str
    port: int
    spec: ServerSpec
    spec_path: Path
    log_path: Path
    process: subprocess.Popen[bytes]
    models: LabModels
    started_in_s: float

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pidfile(self) -> Path:
        assert self.spec.pidfile
        return Path(self.spec.pidfile)

    def client(self, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=timeout)

    def metrics(self) -> str:
        with self.client() as client:
            response = client.get("/metrics")
            response.raise_for_status()
            return response.text

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def preflight_report(self) -> dict[str, Any]:
        assert self.spec.preflight_report
        data: dict[str, Any] = json.loads(Path(self.spec.preflight_report).read_text())
        return data


SPEC_DECODE_RE = re.compile(
    r"^vllm:spec_decode_num_(drafts|accepted_tokens_per_pos)_total\{([^}]*)\}\s+(\S+)$"
)


def spec_decode_counts(metrics_text: str) -> tuple[float, dict[int, float]]:
    """(num_drafts, accepted per position) from a Prometheus scrape."""
    drafts, per_pos = 0.0, {}
    for line in metrics_text.splitlines():
        match = SPEC_DECODE_RE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        if name == "drafts":
            drafts += float(value)
        else:
            position = re.search(r'position="(\d+)"', labels)
            assert position, line
            per_pos[int(position.group(1))] = float(value)
    return drafts, per_pos


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, n: int = 15) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(line for line in lines[-n:] if "Route:" not in line)


def stop_by_pidfile(pidfile: Path, process: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the server's process group, wait, then SIGKILL what is left."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        pid = process.pid if process is not None else 0
    if pid <= 0:
        return
    for sig, wait_s in ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if process is not None:
                process.poll()  # reap, or the zombie keeps the group alive
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            continue
        break
    if process is not None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


class ServerPool:
    """Starts servers on demand and keeps at most one running."""

    def __init__(self, runtime: VllmRuntime, models: LabModels, workdir: Path) -> None:
        self.runtime = runtime
        self.models = models
        self.workdir = workdir
        self.current: VllmServer | None = None
        self.failed: dict[str, str] = {}
        self.slot = VllmSlot()
        yields_slot(self.stop)

    def speculative_config(self, kind: str) -> tuple[dict[str, Any], Path | None]:
        k = NUM_SPECULATIVE_TOKENS
        if kind in ("dflash", "guessed"):
            drafter = self.models.dflash if kind == "dflash" else self.models.dflash_guessed
            return {"method": "dflash", "model": str(drafter), "num_speculative_tokens": k}, (
                drafter
            )
        if kind == "decay":
            drafter = self.models.draft_decay
            config = {"method": "draft_model", "model": str(drafter), "num_speculative_tokens": k}
            return config, drafter
        if kind == "ngram":
            config = {
                "method": "ngram",
                "num_speculative_tokens": k,
                "prompt_lookup_max": 4,
                "prompt_lookup_min": 2,
            }
            return config, None
        raise ValueError(kind)

    def forced(self, kind: str) -> bool:
        """Whether ``kind`` serves a drafter whose config is known wrong (``guessed``, or a
        subclass's ``guessed@K``): started as ``launch --force`` starts it."""
        return kind.partition("@")[0] == "guessed"

    def get(self, kind: str) -> VllmServer:
        current = self.current
        if current is not None and current.kind == kind and current.process.poll() is None:
            return current
        self.stop()
        if kind in self.failed:
            pytest.fail(f"the {kind} server failed to start earlier: {self.failed[kind]}")
        try:
            self.current = self.start(kind)
        except Exception as exc:
            self.failed[kind] = str(exc).splitlines()[0]
            raise
        return self.current

    def start(self, kind: str) -> VllmServer:
        self.slot.acquire()
        run_dir = self.workdir / kind
        run_dir.mkdir(parents=True, exist_ok=True)
        port = _free_port()
        config, drafter = self.speculative_config(kind)
        spec = lab_server_spec(
            self.runtime,
            self.models.target,
            port=port,
            speculative_config=config,
            drafter=drafter,
            served_model_name=MODEL_NAME,
            run_dir=run_dir,
            extra_env={"VLLM_LOG_STATS_INTERVAL": "1"},
        )
        spec.min_shm_bytes = 64 * 2**20
        if self.forced(kind):
            # as launch --force renders it: without a method, preflight checks the drafter's
            # files but does not refuse its config (the argv still carries the method)
            spec.method = None
        spec_path = run_dir / "server.json"
        spec_path.write_text(spec.to_json())
        log_path = run_dir / "server.log"
        started = time.monotonic()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [str(self.runtime.python), "-m", "dflashops.server", "--spec", str(spec_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.runtime.env(),
                start_new_session=True,  # its own process group: stopped as one
                cwd=run_dir,
            )
        server = VllmServer(kind, port, spec, spec_path, log_path, process, self.models, 0.0)
        try:
            self._wait_healthy(server, started)
        except BaseException:
            stop_by_pidfile(server.pidfile, process)
            self.slot.release()
            raise
        server.started_in_s = round(time.monotonic() - started, 1)
        return server

    def _wait_healthy(self, server: VllmServer, started: float) -> None:
        deadline = started + START_TIMEOUT_S
        with httpx.Client(base_url=server.base_url, timeout=2.0) as client:
            while time.monotonic() < deadline:
                code = server.process.poll()
                if code is not None:
                    raise RuntimeError(
                        f"{server.kind} server exited {code} before /health answered:\n"
                        + _tail(server.log_path)
                    )
                try:
                    if client.get("/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(1.0)
        raise RuntimeError(
            f"{server.kind} server not healthy within {START_TIMEOUT_S:.0f}s:\n"
            + _tail(server.log_path)
        )

    def stop(self) -> None:
        """Stop the running server (if any) and free the machine-wide vLLM slot."""
        if self.current is not None:
            stop_by_pidfile(self.current.pidfile, self.current.process)
            self.current = None
        self.slot.release()


@pytest.fixture(scope="session")
def vllm_runtime() -> VllmRuntime:
    return runtime_or_skip()


@pytest.fixture(scope="session")
def lab_models(vllm_runtime: VllmRuntime, tmp_path_factory: pytest.TempPathFactory) -> LabModels:
    """The lab models (seed 0): the cache's build, made there first if it is missing or stale
    (training the target and the DFlash drafter: ~5 min), or the one ``DFLASHOPS_LAB_MODELS``
    names. Shared, so tests only read it.

    Served through a link whose path does not say "dflash": vLLM 0.32 picks a draft model's
    method from its path, and the cache's (``~/.cache/dflashops/…``) would make the decaying
    ``draft_model`` a DFlash drafter (the lab's containers mount it at ``/opt/lab/models``)."""
    named = os.environ.get(LAB_MODELS_ENV)
    models, _built = ensure_lab_models(vllm_runtime, Path(named) if named else None)
    link = tmp_path_factory.mktemp("lab") / "models"
    link.symlink_to(models.root, target_is_directory=True)
    return LabModels(link)


@pytest.fixture(scope="session")
def vllm_pool(
    vllm_runtime: VllmRuntime, lab_models: LabModels, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerPool]:
    pool = ServerPool(vllm_runtime, lab_models, tmp_path_factory.mktemp("vllm-servers"))
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture
def dflash_server(vllm_pool: ServerPool) -> VllmServer:
    """vLLM serving the tiny target with the lab's DFlash drafter (k=4)."""
    return vllm_pool.get("dflash")


@pytest.fixture
def ngram_server(vllm_pool: ServerPool) -> VllmServer:
    """vLLM with n-gram (prompt lookup) drafting (k=4)."""
    return vllm_pool.get("ngram")


@pytest.fixture
def guessed_server(vllm_pool: ServerPool) -> VllmServer:
    """vLLM with the trained DFlash drafter under the incident's guessed config (k=4)."""
    return vllm_pool.get("guessed")


@pytest.fixture
def decay_server(vllm_pool: ServerPool) -> VllmServer:
    """vLLM with the decaying draft model as ``draft_model`` (k=4)."""
    return vllm_pool.get("decay")


def complete_prompts(server: VllmServer, kind: str) -> list[dict[str, Any]]:
    """Send the lab's ``kind`` prompts greedily (ignore_eos, their max_tokens); return the
    responses' JSON bodies, failing the test on any error status."""
    bodies = []
    with server.client() as client:
        for record in server.models.read_prompts(kind):
            response = client.post(
                "/v1/completions",
                json={
                    "model": MODEL_NAME,
                    "prompt": record["prompt"],
                    "max_tokens": record["max_tokens"],
                    "temperature": 0,
                    "ignore_eos": True,
                },
            )
            assert response.status_code == 200, response.text
            bodies.append({**response.json(), "max_tokens": record["max_tokens"]})
    return bodies
