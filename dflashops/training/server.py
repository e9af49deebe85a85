"""The container's server around a training run: up for the data stage, stopped for training
(the GPUs are the server's), and back afterwards.

Every step goes through the launch core (``launch``, ``restart_server``, ``stop_server``,
``await_serving``) over the run's one connection, so the manifest stays the one record of what
runs; this module only decides which, and says so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from dflashops.deployment.access import ContainerAccess
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.manifest import DeployedManifest
from dflashops.inventory.load import Inventory
from dflashops.launch.control import restart_server, stop_server
from dflashops.launch.core import await_serving, launch
from dflashops.playbook.models import Playbook
from dflashops.progress import Say

READY_TIMEOUT_S = 600.0


class TrainingServer:
    """The server of one container over one run; remembers whether it stopped it."""

    def __init__(
        self,
        inventory: Inventory,
        access: ContainerAccess,
        book: Playbook,
        *,
        running: bool,
        manifest: DeployedManifest | None,
        say: Say,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.inventory = inventory
        self.access = access
        self.container = access.name
        self.book = book
        self.running = running
        self.was_running = running
        self.manifest = manifest
        self.say = say
        self.environ = os.environ if environ is None else environ
        self.stopped_by_us = False
        self.log: list[str] = []

    def _note(self, message: str) -> None:
        self.log.append(message)
        self.say(message)

    def serve_for_data(self) -> None:
        """The data stage asks the target itself: start the server if it is stopped (launch
        the playbook when nothing is deployed), and wait until it answers."""
        if self.running:
            if self.manifest is not None:
                key = server_api_key(
                    self.manifest.api_key_env, self.environ, whose=f"the server in {self.container}"
                )
                await_serving(
                    self.access,
                    self.manifest,
                    api_key=key,
                    progress=self.say,
                    timeout_s=READY_TIMEOUT_S,
                )
            return
        if self.manifest is None:
            self._note(
                f"launching playbook {self.book.name} in {self.container} for the data stage"
            )
            launch(
                self.inventory,
                self.container,
                self.book,
                progress=self.say,
                environ=self.environ,
                access=self.access,
            )
        else:
            self._note(f"starting the server in {self.container} for the data stage")
            self._restart()
        self.running = True

    def stop_for(self, stage: str) -> None:
        """Stop the server before a stage that needs its GPUs (saying so)."""
        if not self.running:
            return
        self._note(f"stopping the server in {self.container}: the {stage} stage needs its GPUs")
        stop_server(self.inventory, self.container, access=self.access)
        self.running = False
        self.stopped_by_us = True

    def restore(self, why: str) -> None:
        """Start the server that ran before the run again (only when this run stopped it)."""
        if self.running or not (self.stopped_by_us and self.was_running):
            return
        self._note(f"restarting the previous server in {self.container} ({why})")
        self._restart()
        self.running = True

    def _restart(self) -> None:
        restart_server(
            self.inventory,
            self.container,
            progress=self.say,
            environ=self.environ,
            access=self.access,
        )
