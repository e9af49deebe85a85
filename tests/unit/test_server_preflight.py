"""``python -m dflashops.server``: a bad setup fails in seconds with one line and its own exit
code, before the engine starts; a good one execs the engine with the environment preflight chose.

The engine in these tests is a small Python program that records that it ran, so "the engine
never started" is checked, not assumed. GPUs come from a fake ``torch`` module put first on
``PYTHONPATH`` (this machine has none).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dflashops.server import preflight
from dflashops.server.preflight import ExitCode, PreflightFailure, run_preflight
from dflashops.server.spec import ServerSpec

FAIL_FAST_S = 5.0
DRAFTER_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drafter"


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    elapsed_s: float
    pid: int


def model_dir(path: Path, *, weights: bool = True, config: dict[str, Any] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config or {"architectures": ["Qwen3ForCausalLM"]}))
    if weights:  # a valid safetensors file holding no tensor: the preflight reads its header
        header = b'{"__metadata__":{}}'
        (path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def fake_torch(root: Path, gpus: list[tuple[str, int, int]], peer: bool = True) -> Path:
    """A ``torch`` package whose ``cuda`` reports ``gpus`` as (name, free, total)."""
    package = root / "faketorch" / "torch"
    package.mkdir(parents=True)
    (package / "gpus.json").write_text(json.dumps({"gpus": gpus, "peer": peer}))
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            import json, pathlib
            _state = json.loads((pathlib.Path(__file__).parent / "gpus.json").read_text())
            __version__ = "0.0+fake"

            class cuda:
                @staticmethod
                def is_available():
                    return bool(_state["gpus"])

                @staticmethod
                def device_count():
                    return len(_state["gpus"])

                @staticmethod
                def get_device_name(i):
                    return _state["gpus"][i][0]

                @staticmethod
                def mem_get_info(i):
                    return (_state["gpus"][i][1], _state["gpus"][i][2])

                @staticmethod
                def can_device_access_peer(a, b):
                    return _state["peer"]
            """
        )
    )
    return package.parent


class Setup:
    """A spec on disk whose engine writes ``ran.json`` (pid and a few env vars) if started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ran = root / "ran.json"
        self.report = root / "preflight.json"
        self.pidfile = root / "server.pid"
        self.model = model_dir(root / "target")
        self.drafter = model_dir(root / "drafter")
        engine = (
            "import json, os, sys; json.dump({'pid': os.getpid(), 'env': {k: os.environ.get(k)"
            " for k in ('NCCL_P2P_DISABLE', 'SPEC_VAR', 'VLLM_USE_V2_MODEL_RUNNER')}},"
            " open(sys.argv[1], 'w'))"
        )
        self.spec: dict[str, Any] = {
            "engine": "vllm",
            "engine_version": "0.32.0",
            "argv": [sys.executable, "-c", engine, str(self.ran)],
            "model": str(self.model),
            "drafter": str(self.drafter),
            "method": "draft_model",
            "expect_cuda": False,
            "env": {"SPEC_VAR": "from-spec"},
            "preflight_report": str(self.report),
            "pidfile": str(self.pidfile),
        }
        self.pythonpath: Path | None = None

    def run(self, *extra: str, **changes: Any) -> Run:
        spec_path = self.root / "server.json"
        spec_path.write_text(json.dumps({**self.spec, **changes}))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NCCL_P2P_DISABLE")}
        if self.pythonpath:
            env["PYTHONPATH"] = str(self.pythonpath)
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "dflashops.server", "--spec", str(spec_path), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        stdout, stderr = proc.communicate(timeout=60)
        return Run(proc.returncode, stdout, stderr, time.monotonic() - started, proc.pid)

    def engine_ran(self) -> dict[str, Any] | None:
        if not self.ran.exists():
            return None
        data: dict[str, Any] = json.loads(self.ran.read_text())
        return data


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    return Setup(tmp_path)


def assert_fails_fast(run: Run, setup: Setup, code: int, *needles: str) -> str:
    """Exit ``code`` in under 5 s, ONE stderr line naming the problem, the engine never ran."""
    lines = run.stderr.splitlines()
    assert run.returncode == code, run.stderr
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("dflashops-server: ")
    for needle in needles:
        assert needle in lines[0]
    assert run.elapsed_s < FAIL_FAST_S
    assert setup.engine_ran() is None
    return lines[0]


def test_missing_drafter_weights_fail_fast(setup: Setup) -> None:
    (setup.drafter / "model.safetensors").unlink()
    run = setup.run()
    line = assert_fails_fast(run, setup, ExitCode.DRAFTER_FILES, "drafter", "has no weights")
    assert str(setup.drafter) in line
    report = json.loads(setup.report.read_text())
    assert report["ok"] is False
    assert report["failed_check"] == "drafter"
    assert report["exit_code"] == ExitCode.DRAFTER_FILES
    assert [c["name"] for c in report["checks"]] == ["engine", "model", "drafter"]


def test_missing_drafter_folder_fails_fast(setup: Setup) -> None:
    shutil.rmtree(setup.drafter)
    assert_fails_fast(setup.run(), setup, ExitCode.DRAFTER_FILES, "does not exist")


def test_missing_model_config_fails_fast(setup: Setup) -> None:
    (setup.model / "config.json").unlink()
    assert_fails_fast(setup.run(), setup, ExitCode.MODEL, "model", "has no config.json")


def test_missing_weight_shard_is_named(setup: Setup) -> None:
    (setup.model / "model.safetensors").unlink()
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "gone.safetensors"}}
    (setup.model / "model.safetensors.index.json").write_text(json.dumps(index))
    (setup.model / "model-00001-of-00002.safetensors").write_bytes(b"\x00")
    assert_fails_fast(
        setup.run(), setup, ExitCode.MODEL, "lacks 1 weight shard", "gone.safetensors"
    )


def test_tp2_with_one_gpu_fails_fast(setup: Setup) -> None:
    setup.pythonpath = fake_torch(setup.root, [("NVIDIA H200", 130 * 2**30, 140 * 2**30)])
    run = setup.run(expect_cuda=True, tensor_parallel_size=2)
    assert_fails_fast(
        run, setup, ExitCode.GPU, "gpus", "1 GPU(s) visible, tensor_parallel_size is 2"
    )
    report = json.loads(setup.report.read_text())
    assert report["torch_version"] == "0.0+fake"
    assert report["gpus"] == [
        {"index": 0, "name": "NVIDIA H200", "free_bytes": 130 * 2**30, "total_bytes": 140 * 2**30}
    ]


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is not None, reason="this interpreter has torch"
)
def test_expect_cuda_without_torch_fails_fast(setup: Setup) -> None:
    run = setup.run(expect_cuda=True, tensor_parallel_size=2)
    assert_fails_fast(run, setup, ExitCode.GPU, "torch is not importable")


def test_no_cuda_fails_fast(setup: Setup) -> None:
    setup.pythonpath = fake_torch(setup.root, [])
    run = setup.run(expect_cuda=True, env={"CUDA_VISIBLE_DEVICES": ""})
    assert_fails_fast(run, setup, ExitCode.GPU, "CUDA is not available", "CUDA_VISIBLE_DEVICES=")


def test_busy_gpu_fails_on_free_memory(setup: Setup) -> None:
    setup.pythonpath = fake_torch(setup.root, [("H200", 2 * 2**30, 140 * 2**30)])
    run = setup.run(expect_cuda=True, min_free_gpu_bytes=100 * 2**30)
    assert_fails_fast(run, setup, ExitCode.GPU_MEMORY, "GPU 0 (H200) has 2.00 GiB free")


def test_small_shm_fails_fast(setup: Setup) -> None:
    run = setup.run(min_shm_bytes=2**60)
    assert_fails_fast(run, setup, ExitCode.SHM, "/dev/shm is", "raise the container's /dev/shm")


def test_missing_engine_executable(setup: Setup) -> None:
    run = setup.run(argv=["/nonexistent/bin/vllm", "serve"])
    assert_fails_fast(run, setup, ExitCode.ENGINE, "'/nonexistent/bin/vllm' not found")


def test_invalid_spec_is_one_line(setup: Setup) -> None:
    assert_fails_fast(setup.run(tensor_parallel_size=0), setup, ExitCode.SPEC, "at least 1")


def test_unreadable_spec_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dflashops.server", "--spec", str(tmp_path / "absent.json")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == ExitCode.SPEC
    assert proc.stderr.count("\n") == 1
    assert "cannot read" in proc.stderr


def test_preflight_only_reports_gpus_and_missing_peer_access(setup: Setup) -> None:
    gpus = [("H200", 120 * 2**30, 140 * 2**30), ("H200", 110 * 2**30, 140 * 2**30)]
    setup.pythonpath = fake_torch(setup.root, gpus, peer=False)
    run = setup.run("--preflight-only", expect_cuda=True, tensor_parallel_size=2)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report == json.loads(setup.report.read_text())
    assert report["ok"] is True
    assert [g["free_bytes"] for g in report["gpus"]] == [120 * 2**30, 110 * 2**30]
    assert report["peer_access"] == [{"a": 0, "b": 1, "ok": False}, {"a": 1, "b": 0, "ok": False}]
    assert report["nccl_p2p_disable"] is True
    assert report["exec_env"] == {"NCCL_P2P_DISABLE": "1"}
    assert report["shm"]["total_bytes"] > 0
    assert setup.engine_ran() is None


def test_good_setup_execs_the_engine_in_place(setup: Setup) -> None:
    gpus = [("H200", 120 * 2**30, 140 * 2**30), ("H200", 110 * 2**30, 140 * 2**30)]
    setup.pythonpath = fake_torch(setup.root, gpus, peer=False)
    run = setup.run(expect_cuda=True, tensor_parallel_size=2, min_shm_bytes=1)
    assert run.returncode == 0, run.stderr
    ran = setup.engine_ran()
    assert ran is not None
    # exec keeps the pid: the supervisor's pid, the pidfile and the engine are one process
    assert ran["pid"] == run.pid == int(setup.pidfile.read_text())
    assert ran["env"]["SPEC_VAR"] == "from-spec"
    assert ran["env"]["NCCL_P2P_DISABLE"] == "1"
    assert "preflight ok" in run.stderr


def test_spec_env_overrides_the_nccl_choice(setup: Setup) -> None:
    gpus = [("H200", 120 * 2**30, 140 * 2**30)] * 2
    setup.pythonpath = fake_torch(setup.root, gpus, peer=False)
    run = setup.run(
        expect_cuda=True, tensor_parallel_size=2, env={"NCCL_P2P_DISABLE": "0", "SPEC_VAR": "x"}
    )
    assert run.returncode == 0, run.stderr
    ran = setup.engine_ran()
    assert ran is not None
    assert ran["env"]["NCCL_P2P_DISABLE"] == "0"


def dflash_setup(setup: Setup, drafter_fixture: str) -> None:
    """The Qwen3.6-27B drafter fixtures (header-only weights) with a target that has weights."""
    target = setup.root / "qwen36-target"
    shutil.copytree(DRAFTER_FIXTURES / "qwen36-27b-target", target)
    (target / "model.safetensors").write_bytes(b"\x00" * 16)
    drafter = setup.root / drafter_fixture
    shutil.copytree(DRAFTER_FIXTURES / drafter_fixture, drafter)
    setup.spec |= {
        "model": str(target),
        "drafter": str(drafter),
        "method": "dflash",
        "num_speculative_tokens": 15,
    }


def test_guessed_dflash_config_fails_before_the_engine(setup: Setup) -> None:
    dflash_setup(setup, "qwen36-27b-dflash-guessed")
    line = assert_fails_fast(
        setup.run(), setup, ExitCode.DRAFTER_CONFIG, "drafter-config", "mask_token_id"
    )
    assert "dflashops drafter check" in line
    report = json.loads(setup.report.read_text())
    assert report["drafter_validation"]["status"] == "errors"


def test_corrected_dflash_config_starts_with_the_env_it_needs(setup: Setup) -> None:
    dflash_setup(setup, "qwen36-27b-dflash-corrected")
    run = setup.run()
    assert run.returncode == 0, run.stderr
    report = json.loads(setup.report.read_text())
    assert report["drafter_validation"]["status"] in ("clean", "warnings")
    ran = setup.engine_ran()
    assert ran is not None
    # mixed sliding/full drafter layers need vLLM's V2 runner: the validator says so, launch sets it
    assert ran["env"]["VLLM_USE_V2_MODEL_RUNNER"] == report["exec_env"]["VLLM_USE_V2_MODEL_RUNNER"]


def test_validator_absent_degrades_to_unavailable(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "dflashops.drafter.check", None)  # import raises
    spec = ServerSpec.from_dict({**setup.spec, "method": "dflash"})
    report = run_preflight(spec)
    assert report.ok, report.message
    assert report.drafter_validation is not None
    assert report.drafter_validation["status"] == "unavailable"


def test_validator_crash_does_not_block_the_launch(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("validator bug")

    monkeypatch.setattr("dflashops.drafter.check.check_paths", broken)
    spec = ServerSpec.from_dict({**setup.spec, "method": "dflash"})
    validation = preflight.validate_drafter_hook(spec)
    assert validation["status"] == "unavailable"
    assert "validator bug" in validation["message"]


def test_checks_stop_at_the_first_failure(setup: Setup) -> None:
    shutil.rmtree(setup.model)
    spec = ServerSpec.from_dict({**setup.spec, "min_shm_bytes": 2**60})
    report = run_preflight(spec)
    assert report.failed_check == "model"
    assert [c.name for c in report.checks] == ["engine", "model"]
    with pytest.raises(PreflightFailure):
        preflight.check_shm(spec, report, {})


def neutral_dflash_setup(setup: Setup, drafter_fixture: str) -> None:
    """The Qwen3.6-27B fixtures under names that match no registry entry (as on the H200 run:
    ``target27h``, ``drafter27-guessed``): the target's config fits both the Qwen3.5- and the
    Qwen3.6-27B drafter entries, so only ``drafter_ref`` can say which one to compare with."""
    dflash_setup(setup, drafter_fixture)
    for key, name in (("model", "target27h"), ("drafter", "drafter27")):
        moved = Path(setup.spec[key]).rename(setup.root / name)
        setup.spec[key] = str(moved)


def guess_like_the_gpu_run(drafter: Path) -> None:
    """The guessed mask id of the H200 run (``<|endoftext|>``, 248044): a reserved token, so the
    tokenizer alone cannot catch it (the fixture's own guess, ordinary text, is caught without
    any reference)."""
    config_path = drafter / "config.json"
    config = json.loads(config_path.read_text())
    config["dflash_config"]["mask_token_id"] = 248044
    config_path.write_text(json.dumps(config))


def test_guessed_config_on_an_ambiguous_target_needs_the_ref(setup: Setup) -> None:
    neutral_dflash_setup(setup, "qwen36-27b-dflash-guessed")
    guess_like_the_gpu_run(Path(setup.spec["drafter"]))
    # without a reference the check can only warn (what the host's preflight did before the
    # spec carried drafter.ref): the engine starts with the guessed config
    run = setup.run()
    assert run.returncode == 0, run.stderr
    report = json.loads(setup.report.read_text())
    assert report["drafter_validation"]["status"] == "warnings"
    assert any(f["key"] == "ref" for f in report["drafter_validation"]["findings"])
    setup.ran.unlink()
    # with the playbook's ref the same files are refused before the engine
    line = assert_fails_fast(
        setup.run(drafter_ref="z-lab/Qwen3.6-27B-DFlash"),
        setup,
        ExitCode.DRAFTER_CONFIG,
        "drafter-config",
    )
    assert "z-lab/Qwen3.6-27B-DFlash" in line


def test_corrected_config_with_the_ref_starts(setup: Setup) -> None:
    neutral_dflash_setup(setup, "qwen36-27b-dflash-corrected")
    run = setup.run(drafter_ref="z-lab/Qwen3.6-27B-DFlash")
    assert run.returncode == 0, run.stderr
    report = json.loads(setup.report.read_text())
    assert report["drafter_validation"]["status"] == "clean"
    assert setup.engine_ran() is not None
