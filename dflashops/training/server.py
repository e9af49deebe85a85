"""The container's server around a training run: up for the data stage, stopped for training
(the GPUs are the server's), and back afterwards.

Every step goes through the launch feature (``launch``, ``stop_server``, ``restart_server``), so
the manifest stays the one record of what runs; this module only decides which, and says so.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping

from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.manifest import DeployedManifest
from dflashops.errors import ServerError
from dflashops.inventory.load import Inventory
from dflashops.launch.control import restart_server, stop_server
from dflashops.launch.core import launch
from dflashops.launch.readiness import HttpProber
from dflashops.playbook.models import Playbook
from dflashops.progress import Say

READY_TIMEOUT_S = 600.0
READY_POLL_S = 2.0


class TrainingServer:
    """The server of one container over one run; remembers whether it stopped it."""

    def __init__(
        self,
        inventory: Inventory,
        container: str,
        book: Playbook,
        *,
        running: bool,
        manifest: DeployedManifest | None,
        say: Say,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.inventory = inventory
        self.container = container
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
            self._wait_answering()
            return
        if self.manifest is None:
            self._note(
                f"launching playbook {self.book.name} in {self.container} for the data stage"
            )
            launch(self.inventory, self.container, self.book, progress=self.say)
        else:
            self._note(f"starting the server in {self.container} for the data stage")
            restart_server(self.inventory, self.container, progress=self.say)
        self.running = True

    def stop_for(self, stage: str) -> None:
        """Stop the server before a stage that needs its GPUs (saying so)."""
        if not self.running:
            return
        self._note(f"stopping the server in {self.container}: the {stage} stage needs its GPUs")
        stop_server(self.inventory, self.container)
        self.running = False
        self.stopped_by_us = True

    def restore(self, why: str) -> None:
        """Start the server that ran before the run again (only when this run stopped it)."""
        if self.running or not (self.stopped_by_us and self.was_running):
            return
        self._note(f"restarting the previous server in {self.container} ({why})")
        restart_server(self.inventory, self.container, progress=self.say)
        self.running = True

    def _wait_answering(self) -> None:
        manifest = self.manifest
        if manifest is None:
            return
        key = server_api_key(
            manifest.api_key_env, self.environ, whose=f"the server in {self.container}"
        )
        prober = HttpProber(manifest.endpoint.removesuffix("/v1"), manifest.served_model_name, key)
        deadline = time.monotonic() + READY_TIMEOUT_S
        try:
            while True:
                view = prober()
                if view.probe_ok:
                    return
                if time.monotonic() > deadline:
                    raise ServerError(
                        f"the server in {self.container} does not answer ({view.detail})",
                        hint="check `dflashops logs NAME`; the data stage needs the target served",
                    )
                self.say(f"waiting for the server in {self.container}: {view.detail}")
                time.sleep(READY_POLL_S)
        finally:
            prober.close()
