"""A thin typed facade over proxmoxer: auth from the inventory, our errors, tasks that are checked.

Why not proxmoxer directly: its default timeout is 5 s (too short for a create), its
``ResourceException`` hides PVE's message in ``content``, and ``Tasks.blocking_status`` neither
checks ``exitstatus`` nor has a way to show progress. Everything that talks to the PVE API goes
through :class:`PveClient`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from dflashops.errors import ProxmoxError
from dflashops.inventory.models import Cluster, PasswordAuth

log = logging.getLogger("dflashops.proxmox")

ProgressFn = Callable[[str], None]


@dataclass(frozen=True)
class TaskResult:
    """A finished PVE task."""

    upid: str
    node: str
    exitstatus: str
    log: list[str]

    @property
    def ok(self) -> bool:
        # PVE ends a task that logged warnings with "WARNINGS: n"; that is still a success
        return self.exitstatus == "OK" or self.exitstatus.startswith("WARNINGS")


def upid_node(upid: str) -> str:
    """The node a task runs on, from its UPID (``UPID:node:pid:pstart:start:type:id:user:``)."""
    parts = upid.split(":")
    if len(parts) < 9 or parts[0] != "UPID":
        raise ProxmoxError(f"not a task id: {upid!r}")
    return parts[1]


class PveClient:
    """One authenticated connection to a PVE cluster's API."""

    def __init__(self, cluster: Cluster, secret: str) -> None:
        from proxmoxer import ProxmoxAPI

        url = urlsplit(str(cluster.api_url))
        verify: bool | str = cluster.verify_tls
        if cluster.verify_tls and cluster.ca_file is not None:
            verify = str(cluster.ca_file.expanduser())
        kwargs: dict[str, Any] = {
            "port": url.port or 8006,
            "verify_ssl": verify,
            "timeout": cluster.timeout_s,
            "user": cluster.auth.user,
        }
        if isinstance(cluster.auth, PasswordAuth):
            kwargs["password"] = secret
        else:
            kwargs["token_name"] = cluster.auth.token_name
            kwargs["token_value"] = secret
        self.cluster = cluster
        self.can_set_devices = cluster.can_set_devices
        with translate_errors("login"):
            self.api = ProxmoxAPI(url.hostname, backend="https", **kwargs)

    # ------------------------------------------------------------------ generic calls

    def get(self, path: str, **params: Any) -> Any:
        with translate_errors(f"GET {path}"):
            return self.api(path.strip("/")).get(**params)

    def post(self, path: str, **data: Any) -> Any:
        with translate_errors(f"POST {path}"):
            return self.api(path.strip("/")).post(**data)

    def put(self, path: str, **data: Any) -> Any:
        with translate_errors(f"PUT {path}"):
            return self.api(path.strip("/")).put(**data)

    def delete(self, path: str, **params: Any) -> Any:
        with translate_errors(f"DELETE {path}"):
            return self.api(path.strip("/")).delete(**params)

    # ------------------------------------------------------------------ tasks

    def wait_task(
        self,
        upid: str,
        *,
        timeout_s: float = 600.0,
        poll_s: float = 0.5,
        progress: ProgressFn | None = None,
    ) -> TaskResult:
        """Wait for a task to stop; raise with the log tail unless it ended OK (or WARNINGS)."""
        node = upid_node(upid)
        deadline = time.monotonic() + timeout_s
        seen = 0
        while True:
            status = self.get(f"nodes/{node}/tasks/{upid}/status")
            lines = self._task_log(node, upid)
            if progress is not None:
                for line in lines[seen:]:
                    progress(line)
            seen = len(lines)
            if status.get("status") == "stopped":
                result = TaskResult(upid, node, str(status.get("exitstatus", "")), lines)
                if not result.ok:
                    raise ProxmoxError(
                        f"task {status.get('type', '')} failed: {result.exitstatus}",
                        task_log=lines,
                    )
                return result
            if time.monotonic() >= deadline:
                raise ProxmoxError(
                    f"task {upid} still running after {timeout_s:.0f}s",
                    task_log=lines,
                    hint="it may still finish: check the PVE task list before retrying",
                )
            time.sleep(poll_s)

    def _task_log(self, node: str, upid: str) -> list[str]:
        entries = self.get(f"nodes/{node}/tasks/{upid}/log", start=0, limit=1000) or []
        return [str(entry.get("t", "")) for entry in entries]

    # ------------------------------------------------------------------ common reads

    def version(self) -> str:
        return str(self.get("version")["version"])

    def next_vmid(self) -> int:
        return int(self.get("cluster/nextid"))

    def lxc_resources(self) -> list[dict[str, Any]]:
        """Every container in the cluster (``/cluster/resources``), with node, name and tags."""
        items = self.get("cluster/resources", type="vm") or []
        return [item for item in items if item.get("type") == "lxc"]


@contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Turn proxmoxer and transport exceptions into :class:`ProxmoxError` with PVE's message."""
    import requests
    from proxmoxer import AuthenticationError
    from proxmoxer.core import ResourceException

    try:
        yield
    except ResourceException as exc:
        # PVE puts its message into the HTTP reason phrase, which proxmoxer keeps in .content
        message = str(exc.content or exc.status_message).strip()
        raise ProxmoxError(
            f"{what}: {message}",
            status=exc.status_code,
            errors=_errors_dict(exc.errors),
        ) from None
    except AuthenticationError as exc:
        raise ProxmoxError(f"{what}: authentication failed ({exc})", status=401) from None
    except requests.exceptions.SSLError as exc:
        raise ProxmoxError(
            f"{what}: TLS verification failed ({_first_line(exc)})",
            hint="set ca_file to the cluster's CA (/etc/pve/pve-root-ca.pem on the node)",
        ) from None
    except requests.exceptions.RequestException as exc:
        raise ProxmoxError(f"{what}: {_first_line(exc)}") from None


def _errors_dict(errors: Any) -> dict[str, str] | None:
    if isinstance(errors, dict):
        return {str(k): str(v).strip() for k, v in errors.items()}
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
