"""The two entry points that run in a container without the CLI's boundary (issue 20):
``python -m dflashops.training`` and the bundled ``python -m dflashops.server`` print one line
for an exception nothing expected and exit non-zero; ``--debug`` or ``DFLASHOPS_DEBUG=1`` keeps
the traceback. Run as real subprocesses, as a container runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dflashops.training.job import DataSettings, DrafterShape, TrainingJob

pytestmark = pytest.mark.timeout(60)


def run_module(
    module: str, *args: str, debug_env: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DFLASHOPS_DEBUG"}
    if debug_env:
        env["DFLASHOPS_DEBUG"] = "1"
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=50,
        check=False,
    )


def one_error_line(stderr: str, prefix: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


# ---------------------------------------------------------------- python -m dflashops.training


def job_under_a_file(tmp_path: Path) -> Path:
    """A well-formed job whose run folder lies under a regular file: creating its log folder
    raises NotADirectoryError, which no stage expects."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    job = TrainingJob(
        name="hostile",
        folder=str(blocker / "run"),
        target=str(tmp_path / "target"),
        dataset=str(tmp_path / "prompts.jsonl"),
        data=DataSettings(base_url="http://127.0.0.1:9/v1", served_model="t"),
        drafter=DrafterShape(num_layers=1, block_size=4, target_layer_ids=(0,), mask_token_id=0),
    )
    path = tmp_path / "job.json"
    path.write_text(job.to_json())
    return path


def test_training_unexpected_exception_is_one_line_exit_1(tmp_path: Path) -> None:
    job = job_under_a_file(tmp_path)
    result = run_module("dflashops.training", "data", "--job", str(job))
    assert result.returncode == 1, result.stderr
    line = one_error_line(result.stderr, "error: data stage: ")
    assert str(tmp_path / "not-a-dir") in line  # names what failed
    assert "--debug" in line
    assert result.stdout == ""  # stdout stays JSON lines only


@pytest.mark.parametrize("how", ["flag", "env"])
def test_training_debug_keeps_the_traceback(tmp_path: Path, how: str) -> None:
    job = job_under_a_file(tmp_path)
    flag = ["--debug"] if how == "flag" else []
    result = run_module(
        "dflashops.training", "data", "--job", str(job), *flag, debug_env=how == "env"
    )
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "NotADirectoryError" in result.stderr


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe{}", b"[" * 100_000, b'{"name": 1}'],
    ids=["not-utf8", "deep", "wrong-shape"],
)
def test_training_hostile_job_file_is_one_line_exit_2(tmp_path: Path, content: bytes) -> None:
    job = tmp_path / "job.json"
    job.write_bytes(content)
    result = run_module("dflashops.training", "train", "--job", str(job))
    assert result.returncode == 2, result.stderr
    line = one_error_line(result.stderr, f"error: {job}: not a readable job file")
    assert len(line) < 400


# ---------------------------------------------------------------- python -m dflashops.server


def spec_file(tmp_path: Path, **extra: object) -> Path:
    spec = {"engine": "vllm", "engine_version": "0.1", "argv": ["true"], "model": str(tmp_path)}
    path = tmp_path / "server.json"
    path.write_text(json.dumps({**spec, **extra}))
    return path


def test_server_unexpected_exception_is_one_line_exit_1(tmp_path: Path) -> None:
    # a report path with a NUL byte: open() raises ValueError, which the report writer (it
    # expects OSError) lets through; the entry point's catch-all must still make it one line
    spec = spec_file(tmp_path, preflight_report=str(tmp_path / "r\x00x"))
    result = run_module("dflashops.server", "--spec", str(spec))
    assert result.returncode == 1, result.stderr
    line = one_error_line(result.stderr, "dflashops-server: internal: ValueError: ")
    assert "DFLASHOPS_DEBUG=1" in line


@pytest.mark.parametrize("how", ["flag", "env"])
def test_server_debug_keeps_the_traceback(tmp_path: Path, how: str) -> None:
    spec = spec_file(tmp_path, preflight_report=str(tmp_path / "r\x00x"))
    flag = ["--debug"] if how == "flag" else []
    result = run_module("dflashops.server", "--spec", str(spec), *flag, debug_env=how == "env")
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "ValueError" in result.stderr


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe{}", b"[" * 100_000],
    ids=["not-utf8", "deep"],
)
def test_server_hostile_spec_keeps_its_spec_exit_code(tmp_path: Path, content: bytes) -> None:
    from dflashops.server.preflight import ExitCode

    spec = tmp_path / "server.json"
    spec.write_bytes(content)
    result = run_module("dflashops.server", "--spec", str(spec))
    assert result.returncode == ExitCode.SPEC, result.stderr
    one_error_line(result.stderr, f"dflashops-server: spec {spec}: ")


def test_server_preflight_failure_keeps_its_exit_code(tmp_path: Path) -> None:
    from dflashops.server.preflight import ExitCode

    spec = spec_file(tmp_path)  # the "model" folder has no config.json
    result = run_module("dflashops.server", "--spec", str(spec))
    assert result.returncode == ExitCode.MODEL, result.stderr
    one_error_line(result.stderr, "dflashops-server: model: ")
