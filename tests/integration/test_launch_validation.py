"""Drafter validation over SSH (a real sshd on loopback): config, tokenizer files and safetensors
headers are copied, never the weights, and the result equals ``drafter check`` run locally."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.fetch import fetch_model_meta
from dflashops.lab.host_model import SshHost
from dflashops.launch.validation import validate
from dflashops.playbook.models import Playbook
from tests.support.ssh_hosts import connect_to

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drafter"
PADDING = 1 << 20  # stands in for the weights: must never cross the link


@pytest.fixture
def models(tmp_path: Path) -> Path:
    root = tmp_path / "models"
    for name in ("qwen36-27b-target", "qwen36-27b-dflash-guessed", "qwen36-27b-dflash-corrected"):
        shutil.copytree(FIXTURES / name, root / name)
    for shard in root.glob("*/*.safetensors"):
        with shard.open("ab") as handle:
            handle.write(b"\0" * PADDING)
    return root


def book(models: Path, drafter: str) -> Playbook:
    return Playbook.model_validate(
        {
            "name": "validate",
            "model": {"path": str(models / "qwen36-27b-target")},
            "drafter": {"method": "dflash", "model": {"path": str(models / drafter)}},
            "engine": {"name": "vllm", "version": "0.32.0"},
            "server": {"num_speculative_tokens": 6},
        }
    )


def test_only_headers_are_copied(loopback_host: SshHost, models: Path, tmp_path: Path) -> None:
    remote = models / "qwen36-27b-dflash-corrected"
    local = tmp_path / "copy"
    with connect_to(loopback_host) as conn:
        copied = fetch_model_meta(conn, str(remote), local, weights=True)
    assert sorted(copied) == [
        "config.json",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
    ]
    for shard in local.glob("*.safetensors"):
        original = remote / shard.name
        header_length = int.from_bytes(original.read_bytes()[:8], "little")
        assert shard.stat().st_size == 8 + header_length
        assert original.stat().st_size > PADDING


@pytest.mark.parametrize(
    ("drafter", "status"),
    [("qwen36-27b-dflash-guessed", "errors"), ("qwen36-27b-dflash-corrected", None)],
)
def test_same_result_as_a_local_check(
    loopback_host: SshHost, models: Path, drafter: str, status: str | None
) -> None:
    playbook = book(models, drafter)
    with connect_to(loopback_host) as conn:
        remote, target = validate(conn, playbook)
    local = check_paths(
        str(models / drafter),
        target=str(models / "qwen36-27b-target"),
        engine=parse_engine("vllm==0.32.0"),
        k=6,
    ).result
    assert remote.status == local.summary.status
    assert remote.findings == local.findings
    assert remote.required_env == dict(local.required_env)
    if status:
        assert remote.status == status and remote.failed
    # the reference 3.6 drafter mixes sliding and full attention: vLLM 0.32 needs the V2 runner
    if drafter.endswith("corrected"):
        assert remote.required_env == {"VLLM_USE_V2_MODEL_RUNNER": "1"}
    # the target's config says Gated DeltaNet layers: SGLang would get its extra state buffer
    assert target.hybrid_linear_attention
