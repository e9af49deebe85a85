"""The roofline's facts probed over real SSH: weights sized in a container, nvidia-smi absent."""

from __future__ import annotations

import json

import pytest

from dflashops.bench.roofline import plan_roofline, probe_roofline_facts
from dflashops.lab.host_model import SshHost
from dflashops.roofline.request import RooflineRequest
from tests.support.ssh_hosts import connect_to

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

MODEL = "/srv/roofline/snapshot"


def test_weights_sized_through_hub_symlinks_and_index(netns_hosts: list[SshHost]) -> None:
    conn = connect_to(netns_hosts[0])
    index = {"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}
    conn.run(
        "rm -rf /srv/roofline && mkdir -p /srv/roofline/blobs "
        f"{MODEL} && cd {MODEL} && "
        # a hub cache: the snapshot's shard is a symlink to a blob elsewhere
        "head -c 3000 /dev/zero > /srv/roofline/blobs/abc && "
        "ln -s ../blobs/abc model-1.safetensors && "
        "head -c 1000 /dev/zero > model-2.safetensors && "
        "head -c 4000 /dev/zero > consolidated.safetensors",
        stdin=None,
    )
    conn.run(f"cat > {MODEL}/model.safetensors.index.json", stdin=json.dumps(index))
    facts = probe_roofline_facts(conn, model_dir=MODEL, query_gpus=False)
    assert facts.problems == ()
    assert facts.weights is not None and facts.weights.bytes == 4000
    assert facts.weights.source == f"safetensors file sizes in {MODEL} (2 file(s))"

    conn.run(f"rm {MODEL}/model.safetensors.index.json")
    unindexed = probe_roofline_facts(conn, model_dir=MODEL, query_gpus=False)
    assert unindexed.weights is not None and unindexed.weights.bytes == 8000


def test_a_host_without_gpus_says_what_to_give(netns_hosts: list[SshHost]) -> None:
    conn = connect_to(netns_hosts[0])
    facts = probe_roofline_facts(conn, model_dir="/srv/roofline/nowhere", query_gpus=True)
    assert facts.gpus == () and facts.weights is None
    gpu_problem, weights_problem = facts.problems
    assert "nvidia-smi --query-gpu=name --format=csv,noheader" in gpu_problem
    assert "(exit 127" in gpu_problem and gpu_problem.endswith(
        "give --gpu NAME or --bandwidth-gbps"
    )
    assert weights_problem == "/srv/roofline/nowhere: no .safetensors files; give --weights SIZE"
    plan = plan_roofline(RooflineRequest(gpu="H200"), facts)
    assert plan.spec is None and plan.notes[-1].startswith("no roofline: the roofline needs")
