"""The opt-in collective check of preflight (issue 23), run for real: torch.distributed with two
spawned ranks on the lab runtime's CPU torch (gloo: the same code path as NCCL on GPUs, only the
backend and device differ). A GPU run with NCCL is recorded in benchmarks/RESULTS.md."""

from __future__ import annotations

import json
import subprocess

from dflashops.lab.runtime import VllmRuntime

SCRIPT = """
import json, sys
from dflashops.server.collective import all_reduce_check
world, timeout = int(sys.argv[1]), float(sys.argv[2])
result = all_reduce_check(world, backend="gloo", nbytes=4 * 2**20, timeout_s=timeout)
print(json.dumps(result.to_dict()))
"""


def check(runtime: VllmRuntime, world: int, timeout_s: float) -> dict[str, object]:
    proc = subprocess.run(
        [str(runtime.python), "-c", SCRIPT, str(world), str(timeout_s)],
        capture_output=True,
        text=True,
        env=runtime.env(),
        timeout=180,
        check=True,
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def test_two_ranks_sum_right_and_report_the_bus_bandwidth(vllm_runtime: VllmRuntime) -> None:
    result = check(vllm_runtime, 2, 120)
    assert result["ok"] is True, result
    assert (result["backend"], result["world_size"], result["bytes"]) == ("gloo", 2, 4 * 2**20)
    assert isinstance(result["seconds"], float) and result["seconds"] > 0
    # at world size 2 a ring all-reduce moves each byte once per link: bus = algorithm bandwidth
    assert result["busbw_gbps"] == result["algbw_gbps"]
    assert "2 ranks, 4 MiB: sum right" in str(result["detail"])


def test_ranks_that_never_meet_fail_by_the_deadline_not_hang(vllm_runtime: VllmRuntime) -> None:
    # 0.01 s is shorter than importing torch: both ranks are still on their way when it ends
    result = check(vllm_runtime, 2, 0.01)
    assert result["ok"] is False
    assert str(result["detail"]).startswith(
        "all-reduce across 2 ranks did not finish in 0.01s (ranks 0, 1 still waiting)"
    )
    assert "NCCL_P2P_DISABLE=1" in str(result["detail"])
