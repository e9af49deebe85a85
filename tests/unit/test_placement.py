"""Placement (issue 24): the playbook's ``placement:`` section, its check against the inventory,
and the files each member renders (pure parts; the launch across real hosts is
tests/integration/test_multinode.py)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.errors import PlaybookError, UnknownNameError
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.launch.joining import joined_ranks, member_ranks
from dflashops.launch.members import placement_file, render_member
from dflashops.launch.placement import resolve_members
from dflashops.launch.render import RenderInputs
from dflashops.playbook.models import Playbook
from tests.support.inventories import PLACEMENT_INVENTORY as INVENTORY


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    return load_inventory(path).without_pve_check()


def book(**placement: Any) -> Playbook:
    server = placement.pop("server", {})
    engine = placement.pop("engine", {"version": "0.32.0"})
    return Playbook.model_validate(
        {
            "name": "multi",
            "model": {"path": "/opt/models/m", "served_name": "m"},
            "engine": engine,
            "server": {"port": 30000, **server},
            "placement": placement,
        }
    )


# --------------------------------------------------------------------------- playbook alone


def test_placement_needs_two_distinct_members_and_a_vllm_with_the_native_launcher() -> None:
    with pytest.raises(ValidationError, match="at least 2 items"):
        book(members=["gpu-a"])
    with pytest.raises(ValidationError, match="members must be distinct"):
        book(members=["gpu-a", "gpu-a"])
    with pytest.raises(ValidationError, match=r"vLLM 0\.11\.2 has no native multi-node launcher"):
        book(members=["gpu-a", "gpu-b"], engine={"version": "0.11.2"})
    with pytest.raises(ValidationError, match="vLLM's runtimes only, not sglang"):
        book(members=["gpu-a", "gpu-b"], engine={"name": "sglang", "version": "0.5.6"})
    with pytest.raises(ValidationError, match="runtime ray is not supported yet"):
        book(members=["gpu-a", "gpu-b"], runtime="ray")
    with pytest.raises(ValidationError, match=r"differs from placement\.tensor_parallel_size"):
        book(members=["gpu-a", "gpu-b"], tensor_parallel_size=4, server={"tensor_parallel_size": 2})
    assert book(members=["gpu-a", "gpu-b"], engine={"version": "0.12.0"}).placement is not None


def test_a_playbook_without_placement_is_unchanged() -> None:
    plain = Playbook.model_validate(
        {"name": "one", "model": {"path": "/m"}, "engine": {"version": "0.32.0"}}
    )
    assert plain.placement is None


# --------------------------------------------------------------------------- against the inventory


def test_split_must_use_every_gpu_of_every_member(inventory: Inventory) -> None:
    members = resolve_members(inventory, book(members=["gpu-a", "gpu-b"], tensor_parallel_size=4))
    assert [(m.name, m.rank, m.role, m.address, m.devices) for m in members] == [
        ("gpu-a", 0, "head", "10.200.1.21", 2),
        ("gpu-b", 1, "worker", "10.200.1.22", 2),
    ]
    pp = book(members=["gpu-a", "gpu-b"], tensor_parallel_size=2, pipeline_parallel_size=2)
    assert len(resolve_members(inventory, pp)) == 2
    with pytest.raises(
        PlaybookError, match=r"2 x pipeline_parallel_size 1 = 2 does not match the 4"
    ):
        resolve_members(inventory, book(members=["gpu-a", "gpu-b"], tensor_parallel_size=2))
    with pytest.raises(PlaybookError, match=r"different device counts \(gpu-a=2, gpu-c=4\)"):
        resolve_members(inventory, book(members=["gpu-a", "gpu-c"], tensor_parallel_size=6))
    with pytest.raises(PlaybookError, match="gpu-all has gpus: all") as refused:
        resolve_members(inventory, book(members=["gpu-a", "gpu-all"], tensor_parallel_size=4))
    assert refused.value.hint and "gpus: [0, 1, 2, 3]" in refused.value.hint
    with pytest.raises(PlaybookError, match="member cpu-a has no GPUs"):
        resolve_members(inventory, book(members=["cpu-a", "cpu-b"], tensor_parallel_size=2))


def test_cpu_members_count_one_each(inventory: Inventory) -> None:
    cpu = {"server": {"device": "cpu"}}
    members = resolve_members(
        inventory, book(members=["cpu-a", "cpu-b"], tensor_parallel_size=2, **cpu)
    )
    assert [m.devices for m in members] == [1, 1]
    with pytest.raises(PlaybookError, match="does not match the 2 devices"):
        resolve_members(inventory, book(members=["cpu-a", "cpu-b"], **cpu))


def test_members_need_their_own_static_address(inventory: Inventory) -> None:
    cpu = {"server": {"device": "cpu"}, "tensor_parallel_size": 2}
    with pytest.raises(PlaybookError, match="member dhcp has no static address"):
        resolve_members(inventory, book(members=["cpu-a", "dhcp"], **cpu))
    with pytest.raises(PlaybookError, match=r"cpu-a and same-ip share the address 10\.200\.1\.25"):
        resolve_members(inventory, book(members=["cpu-a", "same-ip"], **cpu))
    with pytest.raises(UnknownNameError, match="no container named 'typo'"):
        resolve_members(inventory, book(members=["cpu-a", "typo"], **cpu))


# --------------------------------------------------------------------------- member files


def rendered_for(inventory: Inventory, playbook: Playbook) -> list[Any]:
    members = resolve_members(inventory, playbook)
    inputs = RenderInputs(supervisor="fallback", venv_python="/opt/v/bin/python", api_key="k")
    return [render_member(playbook, members, m, inputs) for m in members]


def test_each_member_runs_its_rank_and_only_the_head_serves_the_api(inventory: Inventory) -> None:
    playbook = book(
        members=["gpu-a", "gpu-b"],
        tensor_parallel_size=2,
        pipeline_parallel_size=2,
        master_port=29777,
        server={"env": {"VLLM_HOST_IP": "127.0.0.1", "GLOO_SOCKET_IFNAME": "eth0"}},
    )
    head, worker = rendered_for(inventory, playbook)
    common = ["--pipeline-parallel-size", "2", "--nnodes", "2"]
    tail = ["--master-addr", "10.200.1.21", "--master-port", "29777"]
    assert head.rendered.spec.argv[-10:] == [*common, "--node-rank", "0", *tail]
    assert worker.rendered.spec.argv[-11:] == [*common, "--node-rank", "1", *tail, "--headless"]
    for plan in (head, worker):
        argv = plan.rendered.spec.argv
        assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
        assert plan.playbook.container == plan.member.name
        env = plan.rendered.spec.env
        # each member binds the runtime to its own address, whatever the playbook says
        assert env["VLLM_HOST_IP"] == plan.member.address
        assert env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert env["TMPDIR"] == "/var/lib/dflashops/tmp"
        paths = plan.rendered.paths
        assert "/var/lib/dflashops/tmp/README" in paths  # the TMPDIR exists before the start
        record = json.loads(plan.rendered.file(placement_file(DEFAULT_LAYOUT)).content)
        assert record["role"] == plan.member.role and record["rank"] == plan.member.rank
        assert [m["name"] for m in record["members"]] == ["gpu-a", "gpu-b"]
        # a lone rank cannot rejoin its group: the supervisor does not restart a member
        supervise = plan.rendered.file(DEFAULT_LAYOUT.supervisor).content.decode()
        assert '"$failures" -gt 0' in supervise
    # the API key goes to the head only: the workers serve no HTTP
    assert DEFAULT_LAYOUT.secrets in head.rendered.paths
    assert DEFAULT_LAYOUT.secrets not in worker.rendered.paths


def test_the_launch_script_carries_the_members_environment(inventory: Inventory) -> None:
    playbook = book(members=["gpu-a", "gpu-b"], tensor_parallel_size=4)
    _, worker = rendered_for(inventory, playbook)
    script = worker.rendered.file(DEFAULT_LAYOUT.launch_script).content.decode()
    assert f"export VLLM_HOST_IP={shlex.quote('10.200.1.22')}" in script


def test_extra_args_may_not_set_what_the_placement_decides(inventory: Inventory) -> None:
    playbook = book(
        members=["gpu-a", "gpu-b"], tensor_parallel_size=4, server={"extra_args": ["--nnodes=3"]}
    )
    with pytest.raises(PlaybookError, match="sets --nnodes, which the placement decides"):
        rendered_for(inventory, playbook)


# --------------------------------------------------------------------------- joining


def test_joined_ranks_come_from_vllms_own_line_for_this_world() -> None:
    log = (
        "(Worker pid=5158) INFO 12-04 01:12:51 [parallel_state.py:2350] rank 1 in world size 2 "
        "is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank 1, ETP rank 1\n"
        "rank 3 in world size 4 is assigned as DP rank 0\n"  # an older run, other world size
    )
    assert joined_ranks(log, 2) == {1}
    assert member_ranks(1, 4, 2) == [2, 3] and member_ranks(0, 2, 2) == [0]
