"""README's main job: `dflashops lab demo` on an isolated lab replays the incident on real vLLM
CPU servers in a lab container (the trained DFlash drafter with a guessed config is refused, then
forced and measured collapsing, corrected by `drafter push` and measured drafting), tunes k live
and leaves the server at k*; a second run replays it again and reuses k* for the same drafter."""

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


def test_demo_replays_the_incident_and_ends_tuned(demo_env: dict[str, str]) -> None:
    first = json.loads(run_cli(demo_env, "lab", "demo", "--json", timeout=1080).stdout)
    stages = {s["stage"]: s["result"] for s in first["stages"]}
    assert stages["provision"] == "lab-ct1: create"

    # the incident: the guessed config is refused, naming its three wrong keys ...
    assert stages["launch (guessed config)"].startswith("refused: ")
    refused = " ".join(first["refused_keys"])
    for key in ("layer_types", "aux_hidden_state_layer_ids", "mask_token_id"):
        assert key in refused, first["refused_keys"]
    # ... served anyway with --force, it collapses; drafter push writes exactly those keys
    assert stages["launch --force"].startswith("started: http://10.200.12.10:30000")
    guessed = first["acceptance"]["guessed"]
    corrected = first["acceptance"]["corrected"]
    assert guessed["spec_decode_acceptance_length"] <= 1.2
    assert len(first["pushed_keys"]) == 3
    # the corrected drafter really drafts: acceptance back up, position 0 mostly accepted
    assert corrected["spec_decode_acceptance_length"] >= 1.8
    assert corrected["per_position_acceptance"][0] >= 0.5
    assert corrected["output_throughput"] > guessed["output_throughput"]
    assert first["first_reply"] and first["spec_decode"]["num_drafts"] > 0

    tune = first["tune"]
    assert stages["tune"].startswith(f"k*={tune['best_k']}: ")
    assert tune["best_k"] >= 2 and tune["tuned_earlier"] is False
    assert tune["start_k"] == 4 and tune["launches"][0] == 4 and len(tune["launches"]) <= 4
    tuned = Path(tune["playbook"])
    assert tuned.name == "lab-dflash.tuned.yaml" and first["playbook"] == str(tuned)
    assert tuned.read_text().startswith("# tuned for the lab drafter ")
    assert f"num_speculative_tokens: {tune['best_k']}" in tuned.read_text()
    assert BenchReport.load(Path(tune["report"])).tune is not None
    assert first["acceptance"]["tuned"]["k"] == tune["best_k"]

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
    status = json.loads(run_cli(demo_env, "lab", "status", "--json").stdout)
    assert [s["method"] for s in status["servers"]] == ["dflash"]
    assert [s["num_speculative_tokens"] for s in status["servers"]] == [tune["best_k"]]

    # a re-run replays the incident again and reuses k* tuned for this same drafter
    again = json.loads(run_cli(demo_env, "lab", "demo", "--json", timeout=720).stdout)
    stages = {s["stage"]: s["result"] for s in again["stages"]}
    assert stages["provision"] == "lab-ct1: unchanged"
    assert stages["launch (guessed config)"].startswith("refused: ")
    assert len(again["pushed_keys"]) == 3
    assert stages["tune"].startswith(f"k*={tune['best_k']}, tuned earlier")
