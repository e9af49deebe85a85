"""What an ``up`` run is made of (:class:`UpParts`): injected, so the runner is tested without a
container (tests/unit/test_up_runner.py) and the lab demo runs a shorter step table."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from dflashops.deployment.access import ContainerAccess
from dflashops.deployment.lock import container_lock
from dflashops.inventory.load import Inventory
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection
from dflashops.up.inputs import DrafterFiles, drafter_fingerprint
from dflashops.up.plan import STEPS
from dflashops.up.serving import server_serving
from dflashops.up.steps import STEP_FUNCTIONS, StepFunction


@dataclass(frozen=True)
class UpParts:
    """What a run is made of: the step functions (a shorter table stops after its last step),
    how a pair reaches its container, how the drafter's files are read there, and why the
    server of the pair's playbook does not serve there (None: it serves), and how the container
    is locked for the pair's run (its one writer: :mod:`dflashops.deployment.lock`). ``connect``
    None: :func:`~dflashops.deployment.access.connect`, checked against the run's listing."""

    steps: Mapping[str, StepFunction] = field(default_factory=lambda: dict(STEP_FUNCTIONS))
    connect: Callable[[Inventory, str], ContainerAccess] | None = None
    fingerprint: Callable[[SshConnection, str, Playbook], DrafterFiles] = drafter_fingerprint
    serving: Callable[[SshConnection, str], str | None] = server_serving
    lock: Callable[[SshConnection, str, float | None], AbstractContextManager[None]] = (
        lambda conn, name, wait_s: container_lock(conn, name, "up", wait_s=wait_s)
    )

    @property
    def until(self) -> str | None:
        """The last step of a table that leaves later steps out (None: the whole loop)."""
        asked = [step for step in STEPS if step in self.steps]
        return asked[-1] if len(asked) < len(STEPS) else None
