"""The bundled server in the real vLLM venv, with real torch, on this GPU-less machine: a launch
that expects CUDA for TP=2 fails in seconds with one line, and vLLM never starts."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from dflashops.lab.runtime import VllmRuntime, lab_server_spec
from dflashops.server.preflight import ExitCode


def test_tp2_on_a_machine_without_gpus_fails_before_vllm(
    vllm_runtime: VllmRuntime, tmp_path: Path
) -> None:
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (target / "model.safetensors").write_bytes(b"\x00" * 16)
    spec = lab_server_spec(vllm_runtime, target, port=1, run_dir=tmp_path)
    spec.expect_cuda = True
    spec.tensor_parallel_size = 2
    spec_path = tmp_path / "server.json"
    spec_path.write_text(spec.to_json())

    started = time.monotonic()
    proc = subprocess.run(
        [str(vllm_runtime.python), "-m", "dflashops.server", "--spec", str(spec_path)],
        capture_output=True,
        text=True,
        env=vllm_runtime.env(),
        timeout=120,
        check=False,
    )
    elapsed = time.monotonic() - started

    assert proc.returncode == ExitCode.GPU, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("dflashops-server: gpus: CUDA is not available to torch 2.13.0")
    assert "tensor_parallel_size 2 needs GPUs" in lines[0]
    assert elapsed < 5.0
    assert not (tmp_path / "server.pid").exists()  # written only right before exec
    report = json.loads((tmp_path / "preflight.json").read_text())
    assert report["torch_version"].startswith("2.13.0")
