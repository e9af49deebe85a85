"""Where the lab keeps things (standard library only: the lab's light commands import it).

Two roots: the *state* folder (inventory, keys, the PVE double's state, logs), kept until
``lab down``, and the *run* folder for the hosts' sshd files and container filesystems. The run
folder must not lie under ``/root``, ``/etc``, ``/opt``, ``/var`` or ``/srv``, which every lab
container mounts privately over this machine's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LabPaths:
    state: Path
    run: Path

    @property
    def inventory(self) -> Path:
        return self.state / "inventory.yaml"

    @property
    def pidfile(self) -> Path:
        return self.state / "lab.pid"

    @property
    def log(self) -> Path:
        return self.state / "lab.log"

    @property
    def ready(self) -> Path:
        """Written by the lab daemon once every endpoint answers (JSON)."""
        return self.state / "ready.json"

    @property
    def password_file(self) -> Path:
        return self.state / "pve-password"

    @property
    def token_file(self) -> Path:
        return self.state / "pve-token"

    @property
    def ssh_key(self) -> Path:
        return self.state / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state / "ssh" / "known_hosts"

    @property
    def pve_state(self) -> Path:
        return self.state / "pve"

    @property
    def etc_pve(self) -> Path:
        return self.state / "pve" / "etc-pve"


def lab_paths() -> LabPaths:
    """``$XDG_STATE_HOME/dflashops/lab`` (default ``~/.local/state``) and ``/run/dflashops-lab``.

    ``DFLASHOPS_LAB_STATE`` and ``DFLASHOPS_LAB_RUN`` override them (tests run isolated labs).
    """
    state = os.environ.get("DFLASHOPS_LAB_STATE")
    if state is None:
        base = os.environ.get("XDG_STATE_HOME") or str(Path("~/.local/state").expanduser())
        state = str(Path(base) / "dflashops" / "lab")
    run = os.environ.get("DFLASHOPS_LAB_RUN", "/run/dflashops-lab")
    return LabPaths(state=Path(state), run=Path(run))
