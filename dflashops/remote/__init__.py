"""SSH to managed hosts: the one connection wrapper, atomic file puts, parallel groups.

Everything that touches a remote host goes through :class:`SshConnection` (host keys verified,
a deadline on every operation, retries only for connection setup).
"""

from __future__ import annotations

from dflashops.remote.connection import CommandResult, HeldCommand, SshConnection
from dflashops.remote.errors import (
    GroupError,
    HostKeyError,
    RemoteConnectError,
    RemoteDeadlineError,
    RemoteDiskFullError,
    RemoteTransferError,
)
from dflashops.remote.files import (
    BACKUPS_KEPT,
    FileUpload,
    PutResult,
    get_bytes,
    get_text,
    put_atomic,
    put_files,
    sha256_remote,
)
from dflashops.remote.group import GroupResult, HostOutcome, for_each_host, run_group

__all__ = [
    "BACKUPS_KEPT",
    "CommandResult",
    "FileUpload",
    "GroupError",
    "GroupResult",
    "HeldCommand",
    "HostKeyError",
    "HostOutcome",
    "PutResult",
    "RemoteConnectError",
    "RemoteDeadlineError",
    "RemoteDiskFullError",
    "RemoteTransferError",
    "SshConnection",
    "for_each_host",
    "get_bytes",
    "get_text",
    "put_atomic",
    "put_files",
    "run_group",
    "sha256_remote",
]
