"""A playbook's ``placement`` checked against the inventory: who the members are, where they are
reached, and whether the split uses exactly the GPUs they have.

The playbook alone validates what it can (distinct members, engine version against the runtime);
this module adds what needs the inventory too. Pure: no connection is opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dflashops.deployment.access import server_address
from dflashops.errors import PlaybookError
from dflashops.inventory.load import Inventory
from dflashops.playbook.models import Playbook
from dflashops.playbook.placement import Placement

Role = Literal["head", "worker"]


@dataclass(frozen=True)
class Member:
    """One container of a placement: its node rank, where the others reach it, its devices."""

    name: str
    rank: int
    address: str
    devices: int  # GPUs it contributes (a CPU member: 1 process)

    @property
    def role(self) -> Role:
        return "head" if self.rank == 0 else "worker"


def devices_of(playbook: Playbook, gpus: list[int] | str) -> int | None:
    """Devices a member contributes: 1 on the CPU; its listed GPUs (None: ``all``, unknown here)."""
    if playbook.server.device == "cpu":
        return 1
    if isinstance(gpus, str):
        return None
    return len(gpus)


def resolve_members(inventory: Inventory, playbook: Playbook) -> list[Member]:
    """The placement's members in rank order, or a PlaybookError (exit 2) naming what is wrong."""
    placement = playbook.placement
    if placement is None:
        raise PlaybookError("has no placement", source=f"playbook {playbook.name}")
    members = []
    for rank, name in enumerate(placement.members):
        container = inventory.container(name)  # UnknownNameError names the defined ones
        address = server_address(container)
        if not address:
            raise _error(
                f"member {name} has no static address (the others must reach it)",
                hint="give it network.ip in the inventory",
            )
        devices = devices_of(playbook, container.gpus)
        if devices is None:
            raise _error(
                f"member {name} has gpus: all, so the split cannot be checked",
                hint="list its GPU indices in the inventory, e.g. gpus: [0, 1, 2, 3]",
            )
        if devices == 0:
            raise _error(
                f"member {name} has no GPUs in the inventory (server.device is cuda)",
                hint="give it gpus in the inventory, or serve on the CPU (server.device: cpu)",
            )
        members.append(Member(name, rank, address, devices))
    _check_addresses(members)
    _check_split(placement, members)
    return members


def _check_addresses(members: list[Member]) -> None:
    seen: dict[str, str] = {}
    for member in members:
        other = seen.setdefault(member.address, member.name)
        if other != member.name:
            raise _error(
                f"members {other} and {member.name} share the address {member.address}",
                hint="every member needs its own address",
            )


def _check_split(placement: Placement, members: list[Member]) -> None:
    per_member = {m.devices for m in members}
    counts = ", ".join(f"{m.name}={m.devices}" for m in members)
    if len(per_member) != 1:
        # vLLM puts world_size / nnodes ranks on every node
        raise _error(
            f"members have different device counts ({counts}); the runtime puts the same "
            "number of ranks on every member",
            hint="use members with the same number of GPUs",
        )
    total = sum(m.devices for m in members)
    tp, pp = placement.tensor_parallel_size, placement.pipeline_parallel_size
    if tp * pp != total:
        raise _error(
            f"the split tensor_parallel_size {tp} x pipeline_parallel_size {pp} = {tp * pp} "
            f"does not match the {total} devices of the members ({counts})",
            hint=f"choose tensor x pipeline parallel = {total}",
        )


def _error(message: str, *, hint: str) -> PlaybookError:
    return PlaybookError(message, source="placement", hint=hint)
