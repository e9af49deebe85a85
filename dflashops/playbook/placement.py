"""The playbook's ``placement:`` section: one model across several containers (multi-node).

What the playbook alone can check lives here (distinct members, the engine and its version
against the runtime); what needs the inventory too (addresses, GPUs per member against the
split) is :mod:`dflashops.launch.placement`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

# vLLM's native multi-node launcher (``--nnodes/--node-rank/--master-addr/--headless`` on the
# multiprocessing executor) came with vllm-project/vllm#23691 "[V1] Support MP Executor for multi
# node distributed inference", merged in the week to 2025-11-21 (vLLM's weekly summary of that
# date lists it), after the v0.11.x branch was cut: its first release is 0.12.0.
NATIVE_MULTINODE_MIN_VLLM = (0, 12, 0)
PlacementRuntime = Literal["native", "ray"]


class Placement(BaseModel):
    """One model served across several containers by the engine's own distributed runtime.

    The first member is the head: it runs the API server (rank 0) and the runtime's rendezvous;
    the others join it (vLLM ``--headless``). The split (tensor x pipeline parallel) must use
    every GPU of every member; the inventory says how many each has (a CPU member counts one).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    members: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=2, description="inventory container names; the first is the head"
    )
    tensor_parallel_size: int = Field(1, ge=1, le=1024)
    pipeline_parallel_size: int = Field(1, ge=1, le=64)
    runtime: PlacementRuntime = Field(
        "native",
        description="native: vLLM's own multi-node launcher (vLLM >= 0.12.0); ray: a Ray "
        "cluster across the members (needs ray in the engine venv)",
    )
    master_port: int = Field(
        29501, ge=1, le=65535, description="the head's torch.distributed rendezvous port"
    )
    ray_port: int = Field(6379, ge=1, le=65535, description="the Ray head's GCS port (ray)")
    join_timeout_s: float = Field(
        300.0, gt=0, le=3600, description="how long launch waits for every member to join"
    )

    @field_validator("members")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("members must be distinct containers")
        return value

    @property
    def head(self) -> str:
        return self.members[0]

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def ports(self) -> list[int]:
        """The fixed ports the runtime listens on (the head's), besides the API port."""
        return [self.master_port] if self.runtime == "native" else [self.ray_port]


def placement_engine_problem(placement: Placement, engine: str, version: str) -> str | None:
    """Why ``engine`` ``version`` cannot run ``placement`` (None: it can, as far as the playbook
    says; whether ray is installed is a fact of the containers, checked at launch)."""
    if engine != "vllm":
        return f"placement runs on vLLM's runtimes only, not {engine}"
    if placement.runtime == "ray":
        return (
            "placement runtime ray is not supported yet: dflashops drives vLLM's native "
            "multi-node launcher (runtime: native)"
        )
    numbers = tuple(int(n) for n in re.findall(r"\d+", version)[:3])
    if numbers < NATIVE_MULTINODE_MIN_VLLM:
        first = ".".join(map(str, NATIVE_MULTINODE_MIN_VLLM))
        return (
            f"vLLM {version} has no native multi-node launcher (--nnodes): it came in {first}; "
            "use a newer engine.version"
        )
    return None
