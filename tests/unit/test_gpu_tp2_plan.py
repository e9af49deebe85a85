"""Issue 23's two-GPU run, prepared here (no two-GPU host has been lent yet): the specs launch's
renderer makes for TP=1 and TP=2 of the 27B shape, and the model folders they serve. What the
preflight and the drafter check say of those folders is what the GPU host will see."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dflashops.drafter import load_registry, read_drafter, read_target, validate_drafter
from dflashops.server.spec import ServerSpec

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "benchmarks" / "results" / "gpu-h200x2-specs"
NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}


def spec(name: str) -> ServerSpec:
    return ServerSpec.from_file(SPECS / f"{name}.json")


def test_the_committed_specs_are_what_the_renderer_makes_today(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "gpu_specs.py"), "--set", "tp2", str(tmp_path)],
        check=True,
        capture_output=True,
    )
    for path in SPECS.glob("*.json"):
        assert json.loads((tmp_path / path.name).read_text()) == json.loads(path.read_text())


def test_tp1_and_tp2_differ_only_in_the_split_and_the_collective_check() -> None:
    one, two = spec("q27-tp1-k4"), spec("q27-tp2-k4")
    assert (one.tensor_parallel_size, two.tensor_parallel_size) == (1, 2)
    assert (one.collective_check, two.collective_check) == (False, True)
    assert two.min_shm_bytes >= 2**30 and one.min_shm_bytes == 0  # TP needs /dev/shm
    at = two.argv.index("--tensor-parallel-size")
    assert two.argv[at + 1] == "2"
    assert NVLS_OFF.items() <= two.env.items() and NVLS_OFF.items() <= one.env.items()
    assert [a for a in one.argv if a != "1"] == [a for a in two.argv if a != "2"]


def test_the_guessed_run_reaches_the_engine_as_launch_force_would() -> None:
    guessed = spec("q27-guessed-k4")
    assert guessed.drafter == "/root/gpu/drafter27-guessed"
    assert guessed.method is None  # preflight checks the files, not the config: vLLM decides


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("m27")
    script = REPO / "benchmarks" / "gpu_dense27.py"
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
    return out


def check(models: Path, drafter: str) -> list[str]:
    result = validate_drafter(
        read_drafter(str(models / drafter)),
        target=read_target(str(models / "target27")),
        ref=load_registry().resolve("z-lab/Qwen3.6-27B-DFlash"),
    )
    return sorted(f.key for f in result.findings if f.severity == "error")


def test_the_corrected_drafter_is_clean_and_the_guessed_one_names_the_three_keys(
    models: Path,
) -> None:
    assert check(models, "drafter27") == []
    assert check(models, "drafter27-guessed") == [
        "dflash_config.mask_token_id",
        "dflash_config.target_layer_ids",
        "layer_types",
    ]


def test_the_target_is_27b_and_its_tokenizer_covers_the_vocabulary(models: Path) -> None:
    config = json.loads((models / "target27" / "config.json").read_text())
    h, inter, head = config["hidden_size"], config["intermediate_size"], config["head_dim"]
    attention = 2 * h * config["num_attention_heads"] * head + 2 * h * 8 * head
    layers = config["num_hidden_layers"] * (attention + 3 * h * inter)
    params = layers + 2 * config["vocab_size"] * h  # embedding and head, not tied
    assert params == pytest.approx(26.7e9, rel=0.01)
    vocab = json.loads((models / "target27" / "tokenizer.json").read_text())["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(config["vocab_size"]))
