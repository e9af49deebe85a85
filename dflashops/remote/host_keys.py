"""What a connection does with a host key not yet in known_hosts: refuse it (the default), or
record it on first contact (``accept_new_host_key``). A changed key is refused by paramiko
before either policy is asked."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import paramiko

from dflashops.errors import warn
from dflashops.remote.errors import HostKeyError

# connections in parallel threads may record keys into the same file
_known_hosts_lock = threading.Lock()


class RejectUnknownKey(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    def __init__(self, known_hosts: Path, name: str) -> None:
        self.known_hosts = known_hosts
        self.name = name

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        raise HostKeyError(
            f"host key {key.get_name()} {key.fingerprint} is not in {self.known_hosts}",
            host=self.name,
            known_hosts=str(self.known_hosts),
            hint="verify the fingerprint, then add it to known_hosts or allow "
            "accept_new_host_key for the first contact",
        )


class RecordNewKey(paramiko.MissingHostKeyPolicy):  # type: ignore[misc]
    """Trust on first use: append an unknown host's key to known_hosts (paramiko refuses a
    changed key before a policy is asked)."""

    def __init__(self, known_hosts: Path, name: str) -> None:
        self.known_hosts = known_hosts
        self.name = name

    def missing_host_key(self, client: Any, hostname: str, key: Any) -> None:
        with _known_hosts_lock:
            self.known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fresh = not self.known_hosts.exists()
            with self.known_hosts.open("a") as handle:
                handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
            if fresh:
                self.known_hosts.chmod(0o600)
        client.get_host_keys().add(hostname, key.get_name(), key)
        # a security notice the operator must see, whether or not logging is configured
        warn(
            f"{self.name}: recorded new host key {key.get_name()} {key.fingerprint} "
            f"in {self.known_hosts}"
        )
