"""A thin typed facade over proxmoxer: auth from the inventory, our errors, tasks that are checked.

Why not proxmoxer directly: its default timeout is 5 s (too short for a create), its
``ResourceException`` hides PVE's message in ``content``, and ``Tasks.blocking_status`` neither
checks ``exitstatus`` nor has a way to show progress; a transport failure reaches the caller
as requests' nested wording ("HTTPSConnectionPool(...): Max retries exceeded ... Caused by
...") instead of its cause. Everything that talks to the PVE API goes through
:class:`PveClient`.

Over 400 lines on purpose: the facade and the translation of every failure a call can meet
(PVE's refusal, the login, TLS, a refused or silent endpoint) stay in the one module the layers
below ``proxmox`` may import; apart, the translation would need a layer of its own.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from dflashops.errors import ProxmoxError, shorten, warn
from dflashops.inventory.models import Cluster, PasswordAuth

if TYPE_CHECKING:
    from dflashops.inventory.load import Inventory

log = logging.getLogger("dflashops.proxmox")

ProgressFn = Callable[[str], None]
T = TypeVar("T")

DEFAULT_LOCK_WAIT_S = 300.0
DEFAULT_TASK_TIMEOUT_S = 600.0
FIRST_POLL_S = 0.1  # a task's first status poll; the next ones wait twice as long, up to poll_s
# PVE's messages for a guest whose config is locked (``check_lock``) or whose config flock timed
# out; both clear by themselves, so they are waited for, never "fixed" (``pct unlock`` is the
# operator's call).
_LOCKED = re.compile(r"CT is locked|VM is locked|can't lock file")
_EXISTS = re.compile(r"already exists")
_DIGEST = re.compile(r"detected modified configuration")
_NOT_FOUND = re.compile(r"does not exist|no such")
# API endpoints ("host:port") whose last call timed out, and when. Within one timeout of that,
# the next call fails at once: a command that asks a cluster once per container (status,
# provision) would otherwise wait the whole timeout out again for each one.
_TIMED_OUT_AT: dict[str, float] = {}


def is_locked(exc: ProxmoxError) -> bool:
    """The guest (or its config file) is locked by another operation: wait and retry."""
    return bool(_LOCKED.search(exc.message))


def is_already_exists(exc: ProxmoxError) -> bool:
    """A create or ``nextid?vmid=N`` hit a vmid that is taken (500 on create, 400 on nextid)."""
    return bool(_EXISTS.search(exc.message))


def is_digest_conflict(exc: ProxmoxError) -> bool:
    """The config changed between our read and our write (``digest`` mismatch)."""
    return bool(_DIGEST.search(exc.message))


def is_not_found(exc: ProxmoxError) -> bool:
    return exc.status == 404 or bool(_NOT_FOUND.search(exc.message))


def version_tuple(version: str) -> tuple[int, ...]:
    """``"8.1.4"`` -> ``(8, 1, 4)``; trailing text (``"8.1-2"``) is ignored."""
    parts = []
    for piece in re.split(r"[.-]", version.strip()):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


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
        verify = _tls_verify(cluster, url.hostname or "?")
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
        self.address = f"{url.hostname}:{kwargs['port']}"
        with self._translate("login"):
            self.api = ProxmoxAPI(url.hostname, backend="https", **kwargs)
        self._version: dict[str, Any] | None = None
        self._version_lock = threading.Lock()  # asked by every thread of a command at once

    def share_between_threads(self, connections: int = 64) -> None:
        """Keep up to ``connections`` HTTPS connections open, one per thread that calls at once
        (requests keeps 10 per host and, past that, opens and drops one per call)."""
        from requests.adapters import HTTPAdapter

        session = getattr(self.api, "_store", {}).get("session")  # proxmoxer's requests.Session
        if session is not None:
            session.mount("https://", HTTPAdapter(pool_connections=1, pool_maxsize=connections))

    @classmethod
    def for_cluster(cls, inventory: Inventory, cluster_name: str) -> PveClient:
        """A client for one of the inventory's clusters (its secret resolved now)."""
        return cls(inventory.clusters[cluster_name], inventory.secret(cluster_name))

    # ------------------------------------------------------------------ generic calls

    def get(self, path: str, **params: Any) -> Any:
        with self._translate(f"GET {path}"):
            return self.api(path.strip("/")).get(**params)

    def post(self, path: str, **data: Any) -> Any:
        with self._translate(f"POST {path}"):
            return self.api(path.strip("/")).post(**data)

    def put(self, path: str, **data: Any) -> Any:
        with self._translate(f"PUT {path}"):
            return self.api(path.strip("/")).put(**data)

    def delete(self, path: str, **params: Any) -> Any:
        with self._translate(f"DELETE {path}"):
            return self.api(path.strip("/")).delete(**params)

    def _translate(self, what: str) -> AbstractContextManager[None]:
        return translate_errors(what, self.address, self.cluster.timeout_s)

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
        delay = min(FIRST_POLL_S, poll_s)
        while True:
            status = self.get(f"nodes/{node}/tasks/{upid}/status")
            stopped = status.get("status") == "stopped"
            # the log is read for someone who shows it, or for the end (its tail explains)
            lines = self._task_log(node, upid) if progress is not None or stopped else []
            if progress is not None:
                for line in lines[seen:]:
                    progress(line)
            seen = len(lines)
            if stopped:
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
                    task_log=lines or self._task_log(node, upid),
                    hint="it may still finish: check the PVE task list before retrying",
                )
            # most tasks end within a second: look soon, then every poll_s
            time.sleep(delay)
            delay = min(delay * 2, poll_s)

    def _task_log(self, node: str, upid: str) -> list[str]:
        entries = self.get(f"nodes/{node}/tasks/{upid}/log", start=0, limit=1000) or []
        return [str(entry.get("t", "")) for entry in entries]

    # ------------------------------------------------------------------ common reads

    def version_info(self) -> dict[str, Any]:
        """``GET /version`` (read once per client)."""
        with self._version_lock:
            if self._version is None:
                self._version = dict(self.get("version"))
            return self._version

    def version(self) -> str:
        return str(self.version_info()["version"])

    def next_vmid(self, candidate: int | None = None) -> int:
        """The lowest free vmid, or ``candidate`` when it is free (PVE reserves nothing)."""
        if candidate is None:
            return int(self.get("cluster/nextid"))
        return int(self.get("cluster/nextid", vmid=candidate))

    def lxc_resources(self) -> list[dict[str, Any]]:
        """Every container in the cluster (``/cluster/resources``), with node, name and tags."""
        items = self.get("cluster/resources", type="vm") or []
        return [item for item in items if item.get("type") == "lxc"]

    # ------------------------------------------------------------------ locks and tasks

    def retry_locked(
        self,
        what: str,
        fn: Callable[[], T],
        *,
        deadline_s: float = DEFAULT_LOCK_WAIT_S,
        progress: ProgressFn | None = None,
        poll_s: float = 0.5,
    ) -> T:
        """Call ``fn``; while PVE answers "CT is locked", wait and call it again (bounded).

        A lock belongs to someone else's running operation (backup, create, snapshot); it is
        never removed here. Past ``deadline_s`` the last error is raised with a hint.
        """
        end = time.monotonic() + deadline_s
        announced = False
        delay = poll_s
        while True:
            try:
                return fn()
            except ProxmoxError as exc:
                if not is_locked(exc):
                    raise
                if time.monotonic() + delay > end:
                    raise ProxmoxError(
                        f"{what}: still locked after {deadline_s:.0f}s ({exc.message})",
                        status=exc.status,
                        hint="another operation holds the lock; if none runs, an operator may "
                        "clear it with `pct unlock VMID`",
                    ) from None
                if progress is not None and not announced:
                    progress(f"{what}: locked, waiting ({exc.message})")
                announced = True
                time.sleep(delay)
                delay = min(delay * 1.5, 5.0)

    def run_task(
        self,
        what: str,
        start: Callable[[], str],
        *,
        timeout_s: float = DEFAULT_TASK_TIMEOUT_S,
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        progress: ProgressFn | None = None,
    ) -> TaskResult:
        """Start a task and wait for it; a start refused or a task failed on a lock is retried.

        (PVE checks some locks synchronously, others inside the worker, e.g. ``vzstart``.)
        """

        def attempt() -> TaskResult:
            upid = start()
            return self.wait_task(upid, timeout_s=timeout_s, progress=progress)

        return self.retry_locked(what, attempt, deadline_s=lock_wait_s, progress=progress)

    # ------------------------------------------------------------------ containers

    def ct_path(self, node: str, vmid: int, *rest: str) -> str:
        return "/".join(("nodes", node, "lxc", str(vmid), *rest))

    def ct_config(self, node: str, vmid: int, *, current: bool = False) -> dict[str, Any]:
        """The config (pending changes applied unless ``current``), with ``digest`` and ``lxc``."""
        params = {"current": 1} if current else {}
        return dict(self.get(self.ct_path(node, vmid, "config"), **params) or {})

    def ct_pending(self, node: str, vmid: int) -> list[dict[str, Any]]:
        return list(self.get(self.ct_path(node, vmid, "pending")) or [])

    def ct_status(self, node: str, vmid: int) -> dict[str, Any]:
        return dict(self.get(self.ct_path(node, vmid, "status", "current")) or {})

    def ct_interfaces(self, node: str, vmid: int) -> list[dict[str, Any]]:
        """``GET .../interfaces`` (PVE >= 8.1, running containers only)."""
        return list(self.get(self.ct_path(node, vmid, "interfaces")) or [])

    def ct_update(
        self,
        node: str,
        vmid: int,
        params: dict[str, Any],
        *,
        delete: list[str] | None = None,
        digest: str | None = None,
        lock_wait_s: float = DEFAULT_LOCK_WAIT_S,
        progress: ProgressFn | None = None,
    ) -> None:
        """``PUT .../config`` with the digest the change was planned on; waits out locks."""
        data = dict(params)
        if delete:
            data["delete"] = ",".join(delete)
        if digest:
            data["digest"] = digest
        self.retry_locked(
            f"CT {vmid}: update config",
            lambda: self.put(self.ct_path(node, vmid, "config"), **data),
            deadline_s=lock_wait_s,
            progress=progress,
        )

    # ------------------------------------------------------------------ storage and templates

    def storages(self, node: str) -> list[dict[str, Any]]:
        return list(self.get(f"nodes/{node}/storage") or [])

    def storage_content(self, node: str, storage: str, content: str) -> list[dict[str, Any]]:
        return list(self.get(f"nodes/{node}/storage/{storage}/content", content=content) or [])

    def appliances(self, node: str) -> list[dict[str, Any]]:
        """The appliance index (``pveam available``): templates PVE can download."""
        return list(self.get(f"nodes/{node}/aplinfo") or [])

    def download_template(
        self, node: str, storage: str, template: str, *, progress: ProgressFn | None = None
    ) -> TaskResult:
        """Download ``template`` (a name from the appliance index) into ``storage``."""
        return self.run_task(
            f"download {template}",
            lambda: str(self.post(f"nodes/{node}/aplinfo", storage=storage, template=template)),
            progress=progress,
        )


def _tls_verify(cluster: Cluster, host: str) -> bool | str:
    """``verify_ssl`` for proxmoxer: the CA file (checked readable now), True, or False loudly.

    proxmoxer silences urllib3's InsecureRequestWarning for the whole process, so without this
    warning a password would go to an unchecked peer with no word said.
    """
    if not cluster.verify_tls:
        warn(
            f"verify_tls is false for {host}: the PVE {_credential(cluster)} is sent without "
            "checking the server's certificate (set ca_file instead)"
        )
        return False
    if cluster.ca_file is None:
        return True
    try:
        ca_file = cluster.ca_file.expanduser()
        with ca_file.open("rb"):
            pass
    except (OSError, RuntimeError) as exc:
        reason = getattr(exc, "strerror", None) or "its ~user does not exist"
        raise ProxmoxError(
            f"ca_file {cluster.ca_file} for {host} cannot be read: {reason}",
            hint="copy /etc/pve/pve-root-ca.pem from the node there, or fix ca_file",
        ) from None
    return str(ca_file)


def _credential(cluster: Cluster) -> str:
    return "password" if isinstance(cluster.auth, PasswordAuth) else "API token"


@contextmanager
def translate_errors(what: str, address: str, timeout_s: float) -> Iterator[None]:
    """Turn proxmoxer and transport exceptions into :class:`ProxmoxError` with PVE's message,
    or with why ``address`` gave none (refused, timed out after ``timeout_s``: the cause, never
    the library's wording)."""
    import requests
    from proxmoxer import AuthenticationError
    from proxmoxer.core import ResourceException

    timed_out_at = _TIMED_OUT_AT.get(address)
    if timed_out_at is not None and time.monotonic() - timed_out_at < timeout_s:
        ago = time.monotonic() - timed_out_at
        raise ProxmoxError(
            f"{what}: not asked: {address} timed out after {timeout_s:g} s "
            f"on a call {ago:.1f} s ago"
        )
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
    except requests.exceptions.Timeout as exc:
        _TIMED_OUT_AT[address] = time.monotonic()
        connected = not isinstance(exc, requests.exceptions.ConnectTimeout)
        raise ProxmoxError(
            f"{what}: {address} timed out after {timeout_s:g} s "
            + ("(connected, no answer)" if connected else "(no connection)"),
            hint=(
                "pveproxy may be hung or the node overloaded"
                if connected
                else "check the address, the route and the firewall"
            )
            + "; the cluster's timeout_s sets the wait",
        ) from None
    except requests.exceptions.RequestException as exc:
        cause = _cause(exc)
        raise ProxmoxError(
            f"{what}: {address}: {cause}",
            hint="is pveproxy running on the node, and api_url right?"
            if cause == "connection refused"
            else None,
        ) from None
    _TIMED_OUT_AT.pop(address, None)  # it answered


def _errors_dict(errors: Any) -> dict[str, str] | None:
    if isinstance(errors, dict):
        return {str(k): str(v).strip() for k, v in errors.items()}
    return None


def _cause(exc: BaseException) -> str:
    """Why a request failed, from the innermost exception (requests wraps urllib3's, which
    wraps the socket's): ``connection refused``, ``no route to host``, a name not resolved."""
    for _ in range(10):  # a chain is a few links long; never follow a cycle forever
        reason = getattr(exc, "reason", None)
        inner = reason if isinstance(reason, BaseException) else exc.__cause__ or exc.__context__
        if inner is None and exc.args and isinstance(exc.args[0], BaseException):
            inner = exc.args[0]
        if inner is None or inner is exc:
            break
        exc = inner
    if isinstance(exc, socket.gaierror):
        return f"name not resolved ({exc.strerror})"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror[0].lower() + exc.strerror[1:]
    return _first_line(exc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return shorten(text[0]) if text else type(exc).__name__
