"""The model of an SSH host in the lab: :class:`Mount` (a private mount a netns host sees) and
:class:`SshHost` (a running sshd host: what a client needs, plus what teardown needs).

Plain data only; starting, stopping and inspecting hosts is :mod:`dflashops.lab.hosts`.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from dflashops.inventory.models import SshAccess
from dflashops.lab.errors import LabError

MountKind = Literal["tmpfs", "overlay", "bind"]


@dataclass(frozen=True)
class Mount:
    """One private mount a netns host sees over ``target`` (nobody else sees it).

    * ``tmpfs``: an empty, writable directory (``mode``, default 0755); gone when the host stops
      or restarts.
    * ``overlay``: ``target``'s current content, writable copy-on-write. Writes go to ``source``
      when given (they survive :func:`~dflashops.lab.hosts.restart_host`), else to a tmpfs (lost
      on restart).
    * ``bind``: ``source`` from this machine, read-only unless ``read_only=False`` (models,
      venvs, or a persistent data directory).
    """

    target: str
    kind: MountKind = "tmpfs"
    source: Path | None = None
    read_only: bool = False
    mode: str = "0755"  # a tmpfs's permissions (octal)

    @classmethod
    def tmpfs(cls, target: str, *, mode: str = "0755") -> Mount:
        return cls(target, "tmpfs", mode=mode)

    @classmethod
    def overlay(cls, target: str, upper: Path | None = None) -> Mount:
        return cls(target, "overlay", upper)

    @classmethod
    def bind(cls, source: Path, target: str, *, read_only: bool = True) -> Mount:
        return cls(target, "bind", source, read_only)

    def __post_init__(self) -> None:
        if not self.target.startswith("/") or self.target == "/":
            raise LabError(f"mount target must be an absolute path below /, not {self.target!r}")
        if not re.fullmatch(r"[0-7]{3,4}", self.mode):
            raise LabError(f"tmpfs mode must be octal digits, not {self.mode!r}")
        if self.kind == "bind" and self.source is None:
            raise LabError(f"bind mount on {self.target} needs a source")


@dataclass(frozen=True)
class SshHost:
    """A running sshd host: everything a client needs, plus what teardown needs."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path
    known_hosts: Path
    pid: int
    workdir: Path
    netns: str | None = None
    veth: str | None = None
    hostname: str | None = None
    mounts: tuple[Mount, ...] = ()
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def log_file(self) -> Path:
        """sshd's own log (``-e`` output, LogLevel VERBOSE)."""
        return self.workdir / "sshd.log"

    def access(self, *, accept_new_host_key: bool = False) -> SshAccess:
        """The inventory's view of this host (host keys verified against :attr:`known_hosts`)."""
        return SshAccess(
            host=self.address,
            port=self.port,
            user=self.user,
            key_file=self.key_file,
            known_hosts=self.known_hosts,
            accept_new_host_key=accept_new_host_key,
        )
