"""README's main job: `dflashops lab demo` on an isolated lab ends with a real vLLM CPU server
serving the tiny target with DFlash in a lab container, answering a chat completion and exposing
`vllm:spec_decode_*` counters, then tunes k live and leaves the server at k*; a second run is
idempotent (the tuned playbook is reused, the server is not restarted)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dflashops.bench.models import BenchReport
from tests.support.lab import isolated_lab_env, require_lab, run_cli
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = [pytest.mark.root, pytest.mark.vllm, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def demo_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_lab()
    runtime_or_skip()
    env = isolated_lab_env(tmp_path_factory.mktemp("demo"), tag="d", cidr="10.200.12.0/24")
    run_cli(env, "lab", "down", check=False)
    with VllmSlot():
        yield env
        run_cli(env, "lab", "down", check=False, timeout=180)


def test_demo_ends_with_a_dflash_server_answering(demo_env: dict[str, str]) -> None:
    first = json.loads(run_cli(demo_env, "lab", "demo", "--json", timeout=1080).stdout)
    stages = {s["stage"]: s["result"] for s in first["stages"]}
    assert stages["provision"] == "lab-ct1: create"
    assert stages["launch"].startswith("started: http://10.200.12.10:30000")
    assert first["first_reply"]
    assert first["spec_decode"]["num_drafts"] > 0  # the drafter really drafted
    assert first["bench"]["output_throughput"] > 0
    tune = first["tune"]
    assert stages["tune"].startswith(f"k*={tune['best_k']}: ")
    assert tune["start_k"] == 4 and tune["launches"][0] == 4 and len(tune["launches"]) <= 4
    assert tune["measured_tok_s"] > 0 and tune["tuned_earlier"] is False
    tuned = Path(tune["playbook"])
    assert tuned.name == "lab-dflash.tuned.yaml" and first["playbook"] == str(tuned)
    assert f"num_speculative_tokens: {tune['best_k']}" in tuned.read_text()
    assert BenchReport.load(Path(tune["report"])).tune is not None

    endpoint = first["endpoint"]
    with httpx.Client(timeout=60) as client:
        reply = client.post(
            f"{endpoint}/chat/completions",
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8,
            },
        )
        assert reply.status_code == 200
        metrics = client.get(endpoint.removesuffix("/v1") + "/metrics").text
    assert "vllm:spec_decode_num_drafts_total" in metrics

    status = json.loads(run_cli(demo_env, "lab", "status", "--json").stdout)
    assert [s["method"] for s in status["servers"]] == ["dflash"]
    assert [s["num_speculative_tokens"] for s in status["servers"]] == [tune["best_k"]]

    again = json.loads(run_cli(demo_env, "lab", "demo", "--json", timeout=540).stdout)
    stages = {s["stage"]: s["result"] for s in again["stages"]}
    assert stages["provision"] == "lab-ct1: unchanged"
    assert stages["launch"].startswith("unchanged")  # the server already runs at k*
    assert stages["tune"].startswith(f"k*={tune['best_k']}, tuned earlier")
