"""What the double knows: settings, storages and templates, config files, running containers.

Container configs live only in files (``<etc_pve>/nodes/<node>/lxc/<vmid>.conf``, with
``<etc_pve>/lxc`` linking to the first node's folder as on a real node): every read parses the
file, every change writes it, so edits made directly in the file (e.g. raw ``lxc.*`` lines written
over SSH) are what the API reports. Runtime state (running or not, start time, address) is kept in
memory; a restarted double sees every container stopped.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dflashops.lab.pve import conffile
from dflashops.lab.pve.apischema import ApiSchema
from dflashops.lab.pve.auth import Authenticator
from dflashops.lab.pve.conffile import ContainerConfig
from dflashops.lab.pve.errors import fail
from dflashops.lab.pve.tasks import TaskRegistry
from dflashops.lab.pve.validate import property_schema

CONFIG_LOCK_TIMEOUT = 10.0  # PVE's lock_config waits 10 s for the config flock


class ContainerBackend(Protocol):
    """Turns container lifecycle events into something real (e.g. a netns host with sshd).

    Calls come from task worker threads; an exception fails the task with its message.
    """

    def on_create(self, vmid: int, ssh_public_keys: str | None) -> None:
        """The container's rootfs was made; PVE writes the keys to root's authorized_keys."""

    def on_start(self, vmid: int, config: Mapping[str, str]) -> str | None:
        """Start the container; return its IPv4 address if it has one."""

    def on_stop(self, vmid: int) -> None:
        """Stop the container (its files survive for the next start)."""

    def on_destroy(self, vmid: int) -> None:
        """Remove everything the container had."""

    def interfaces(self, vmid: int) -> list[dict[str, Any]]:
        """``GET .../interfaces`` for a running container, in PVE's shape."""

    def is_running(self, vmid: int) -> bool:
        """Whether a container started here still runs (False once it died under the double)."""


@dataclass(frozen=True)
class Appliance:
    """One entry of the appliance index (``pveam available``)."""

    template: str
    os: str
    headline: str
    section: str = "system"

    def info(self) -> dict[str, Any]:
        package, version = self.template.split("_")[0], self.template.split("_")[1]
        return {
            "template": self.template,
            "package": package,
            "version": version,
            "os": self.os,
            "section": self.section,
            "type": "lxc",
            "headline": self.headline,
            "description": self.headline,
            "location": f"http://download.proxmox.com/images/system/{self.template}",
            "maintainer": "Proxmox Support Team <support@proxmox.com>",
            "source": "http://download.proxmox.com/images/system",
            "architecture": "amd64",
            "infopage": "https://pve.proxmox.com/wiki/Linux_Container#pct_supported_distributions",
        }


DEFAULT_APPLIANCES = (
    Appliance("debian-12-standard_12.12-1_amd64.tar.zst", "debian-12", "Debian 12 Bookworm"),
    Appliance("debian-13-standard_13.1-2_amd64.tar.zst", "debian-13", "Debian 13 Trixie"),
    Appliance("ubuntu-22.04-standard_22.04-1_amd64.tar.zst", "ubuntu-22.04", "Ubuntu 22.04"),
    Appliance("ubuntu-24.04-standard_24.04-2_amd64.tar.zst", "ubuntu-24.04", "Ubuntu 24.04"),
    Appliance("alpine-3.22-default_20250617_amd64.tar.xz", "alpine-3.22", "Alpine Linux 3.22"),
)


@dataclass
class Storage:
    """A storage; ``content`` as in storage.cfg. Template files are tracked in ``templates``."""

    name: str
    type: str
    content: frozenset[str]
    total: int = 500 << 30
    templates: dict[str, int] = field(default_factory=dict)  # file name -> ctime

    def info(self, used: int) -> dict[str, Any]:
        return {
            "storage": self.name,
            "type": self.type,
            "content": ",".join(sorted(self.content)),
            "active": 1,
            "enabled": 1,
            "shared": 0,
            "total": self.total,
            "used": used,
            "avail": self.total - used,
            "used_fraction": used / self.total,
        }


def default_storages() -> list[Storage]:
    return [
        Storage("local", "dir", frozenset({"iso", "vztmpl", "backup", "import"}), 100 << 30),
        Storage("local-lvm", "lvmthin", frozenset({"rootdir", "images"})),
    ]


@dataclass
class DoubleSettings:
    """Everything the double is started with."""

    state_dir: Path
    users: Mapping[str, str]  # "root@pam" -> password
    tokens: Mapping[str, str] = field(default_factory=dict)  # "root@pam!name" -> secret
    etc_pve: Path | None = None  # default: <state_dir>/etc-pve
    nodes: tuple[str, ...] = ("lab",)
    appliances: tuple[Appliance, ...] = DEFAULT_APPLIANCES
    preloaded_templates: tuple[str, ...] = ("ubuntu-24.04-standard_24.04-2_amd64.tar.zst",)
    task_delay: float = 0.05  # seconds every worker task takes
    create_delay: float = 0.5  # seconds a create task holds its "create" lock
    backend: ContainerBackend | None = None
    device_exists: Callable[[str], bool] | None = None  # devN paths; None: accept any /dev/ path
    pci_devices: Sequence[Mapping[str, Any]] = ()
    tls_hosts: tuple[str, ...] = ("127.0.0.1", "localhost")
    pve_version: str = "9.1.2"
    node_cpus: int = 32
    node_memory: int = 256 << 30

    @property
    def etc_pve_dir(self) -> Path:
        return self.etc_pve or self.state_dir / "etc-pve"


@dataclass
class Runtime:
    """In-memory state of one container."""

    running: bool = False
    started: float = 0.0
    address: str | None = None


class ConfigStore:
    """Container config files of every node, with PVE's per-container config lock."""

    def __init__(self, etc_pve: Path, nodes: Sequence[str], key_schema: Mapping[str, Any]) -> None:
        self.etc_pve = etc_pve
        self.nodes = tuple(nodes)
        self.key_schema = key_schema
        self._booleans = frozenset(k for k, v in key_schema.items() if v.get("type") == "boolean")
        self._locks: dict[int, threading.Lock] = {}
        self._guard = threading.Lock()
        for node in self.nodes:
            (etc_pve / "nodes" / node / "lxc").mkdir(parents=True, exist_ok=True)
        link = etc_pve / "lxc"
        if not link.exists() and not link.is_symlink():
            link.symlink_to(Path("nodes") / self.nodes[0] / "lxc")

    def relpath(self, node: str, vmid: int) -> str:
        return f"nodes/{node}/lxc/{vmid}.conf"

    def file(self, node: str, vmid: int) -> Path:
        return self.etc_pve / self.relpath(node, vmid)

    def node_of(self, vmid: int) -> str | None:
        return next((node for node in self.nodes if self.file(node, vmid).exists()), None)

    def vmids(self, node: str) -> list[int]:
        folder = self.etc_pve / "nodes" / node / "lxc"
        found = (path.stem for path in folder.glob("*.conf"))
        return sorted(int(stem) for stem in found if stem.isdigit())

    def all_vmids(self) -> dict[int, str]:
        return {vmid: node for node in self.nodes for vmid in self.vmids(node)}

    def load(self, node: str, vmid: int) -> ContainerConfig:
        try:
            raw = self.file(node, vmid).read_bytes()
        except FileNotFoundError:
            raise fail(f"Configuration file '{self.relpath(node, vmid)}' does not exist") from None
        return conffile.parse(raw, vmid, self._booleans)

    def save(self, node: str, vmid: int, conf: ContainerConfig) -> None:
        path = self.file(node, vmid)
        raw = conffile.render(conf)
        tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}.{threading.get_ident()}")
        tmp.write_bytes(raw)
        tmp.replace(path)
        conf.digest = conffile.digest_of(raw)

    def remove(self, node: str, vmid: int) -> None:
        self.file(node, vmid).unlink(missing_ok=True)

    @contextlib.contextmanager
    def locked(self, vmid: int) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(vmid, threading.Lock())
        if not lock.acquire(timeout=CONFIG_LOCK_TIMEOUT):
            raise fail(f"can't lock file '/run/lock/lxc/pve-config-{vmid}.lock' - got timeout")
        try:
            yield
        finally:
            lock.release()

    def schema_of(self, key: str) -> Mapping[str, Any] | None:
        return property_schema(self.key_schema, key)


class DoubleState:
    """The double's whole state, shared by all request handlers and task workers."""

    def __init__(self, settings: DoubleSettings, schema: ApiSchema) -> None:
        self.settings = settings
        self.schema = schema
        config_returns = schema.method("/nodes/{node}/lxc/{vmid}/config", "GET") or {}
        key_schema = {
            key: value
            for key, value in config_returns.get("returns", {}).get("properties", {}).items()
            if key not in ("digest", "lxc")
        }
        self.configs = ConfigStore(settings.etc_pve_dir, settings.nodes, key_schema)
        self.storages: dict[str, Storage] = {s.name: s for s in default_storages()}
        now = int(time.time())
        for template in settings.preloaded_templates:
            self.storages["local"].templates[template] = now
        self.appliances = {a.template: a for a in settings.appliances}
        self.tasks = TaskRegistry()
        self.authenticator = Authenticator(settings.users, settings.tokens)
        self.runtime: dict[int, Runtime] = {}
        self.lock = threading.RLock()
        self.started = time.time()

    def runtime_of(self, vmid: int) -> Runtime:
        with self.lock:
            runtime = self.runtime.setdefault(vmid, Runtime())
        backend = self.settings.backend
        if runtime.running and backend is not None and not backend.is_running(vmid):
            # like a CT whose init died: PVE reports it stopped, and a start must work again
            backend.on_stop(vmid)
            runtime.running, runtime.address = False, None
        return runtime

    def check_node(self, node: str) -> None:
        if node not in self.settings.nodes:
            raise fail(
                f"hostname lookup '{node}' failed - failed to get address info for: {node}: "
                "Name or service not known"
            )

    def storage(self, name: str) -> Storage:
        storage = self.storages.get(name)
        if storage is None:
            raise fail(f"storage '{name}' does not exist")
        return storage
