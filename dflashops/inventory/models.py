"""The inventory schema: Proxmox clusters and nodes, containers, groups.

Every model forbids unknown keys (a typo must not silently fall back to a default) and is frozen
once merged. Container fields can come from ``defaults``, a group's ``vars``, the container itself
and ``--set``; :mod:`dflashops.inventory.load` merges them in that order.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    HttpUrl,
    Tag,
    field_validator,
)

from dflashops.secrets import SecretRef

NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_RE)]
MANAGED_TAG = "dflashops"
Passthrough = Literal["auto", "devN", "raw"]
NvidiaDriver = Literal["install", "expect-present", "skip"]


class Strict(BaseModel):
    """Base: unknown keys are errors, values are immutable after validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SshAccess(Strict):
    """How to reach a host over SSH. Host keys are verified against ``known_hosts`` by default."""

    host: str | None = None
    port: int = Field(22, ge=1, le=65535)
    user: str = "root"
    key_file: Path | None = None
    known_hosts: Path | None = None
    accept_new_host_key: bool = Field(
        False, description="record an unknown host key on first contact (never a changed one)"
    )


class TokenAuth(Strict):
    """PVE API token. Cannot set ``devN`` (only root@pam with a password can)."""

    user: str = "root@pam"
    token_name: str
    token_secret: SecretRef


class PasswordAuth(Strict):
    """Password login (``/access/ticket``). root@pam with a password may set ``devN``."""

    user: str = "root@pam"
    password: SecretRef


def _auth_kind(value: object) -> str:
    """Pick the auth model by its keys, so errors speak of the one the user meant."""
    if isinstance(value, dict):
        return "token" if {"token_name", "token_secret"} & value.keys() else "password"
    return "token" if isinstance(value, TokenAuth) else "password"


Auth = Annotated[
    Annotated[TokenAuth, Tag("token")] | Annotated[PasswordAuth, Tag("password")],
    Discriminator(_auth_kind),
]


class Node(Strict):
    """One PVE node: its name in PVE and SSH access for host facts and ``pct``."""

    pve_name: str | None = Field(None, description="node name in PVE; defaults to the key")
    ssh: SshAccess = SshAccess()


class Cluster(Strict):
    """One PVE API endpoint and its nodes."""

    api_url: HttpUrl
    verify_tls: bool = True
    ca_file: Path | None = None
    timeout_s: float = Field(30.0, gt=0, description="per API call; proxmoxer's default is 5 s")
    auth: Auth
    nodes: dict[Name, Node] = Field(min_length=1)

    @field_validator("api_url")
    @classmethod
    def _https_only(cls, url: HttpUrl) -> HttpUrl:
        if url.scheme != "https":
            raise ValueError("the PVE API is served over https")
        return url

    @property
    def can_set_devices(self) -> bool:
        """Whether the API accepts ``devN`` from us (PVE: only root@pam with a password)."""
        return isinstance(self.auth, PasswordAuth) and self.auth.user == "root@pam"


class Network(Strict):
    """The container's ``net0``: a bridge and a static address or DHCP."""

    bridge: str = "vmbr0"
    ip: str = "dhcp"
    gateway: str | None = None
    vlan: int | None = Field(None, ge=1, le=4094)

    @field_validator("ip")
    @classmethod
    def _ip_or_dhcp(cls, value: str) -> str:
        if value == "dhcp":
            return value
        try:
            iface = ipaddress.ip_interface(value)
        except ValueError:
            raise ValueError(f"ip must be dhcp or ADDRESS/PREFIX, not {value!r}") from None
        if "/" not in value:
            raise ValueError(f"give the prefix length: {value}/24, for example")
        return str(iface)

    @field_validator("gateway")
    @classmethod
    def _gateway(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.ip_address(value)
        return value

    @property
    def address(self) -> str | None:
        """The static address without prefix, or None for DHCP."""
        return None if self.ip == "dhcp" else str(ipaddress.ip_interface(self.ip).ip)


class Mount(Strict):
    """A host directory (model weights) bind-mounted into the container."""

    host_path: Path
    path: Path
    read_only: bool = True

    @field_validator("host_path", "path")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        if not value.is_absolute():
            raise ValueError("must be an absolute path")
        return value


class ContainerVars(Strict):
    """Container fields that defaults and groups may set (all optional)."""

    cluster: Name | None = None
    node: Name | None = None
    template: str | None = None
    storage: str | None = None
    rootfs_gb: int | None = Field(None, ge=4, le=65536)
    cores: int | None = Field(None, ge=1, le=8192)
    memory_mb: int | None = Field(None, ge=512)
    swap_mb: int | None = Field(None, ge=0)
    unprivileged: bool | None = None
    onboot: bool | None = None
    network: Network | None = None
    nameserver: str | None = None
    gpus: list[int] | Literal["all"] | None = None
    mounts: list[Mount] | None = None
    shm_gb: int | None = Field(None, ge=1)
    ssh: SshAccess | None = None
    passthrough: Passthrough | None = None
    nvidia_driver: NvidiaDriver | None = None


class ContainerEntry(ContainerVars):
    """A container as written in the file: its own fields plus identity and groups."""

    vmid: int | Literal["auto"] | None = None
    groups: list[Name] = []


class Container(Strict):
    """One LXC container dflashops manages (identified by name and the ``dflashops`` tag)."""

    name: Name
    vmid: int | Literal["auto"] = "auto"
    cluster: Name
    node: Name
    groups: list[Name] = []
    template: str = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"
    storage: str = "local-lvm"
    rootfs_gb: int = Field(64, ge=4, le=65536)
    cores: int = Field(8, ge=1, le=8192)
    memory_mb: int = Field(65536, ge=512)
    swap_mb: int = Field(0, ge=0)
    unprivileged: bool = True
    onboot: bool = True
    network: Network = Network()
    nameserver: str | None = None
    gpus: list[int] | Literal["all"] = []
    mounts: list[Mount] = []
    shm_gb: int = Field(16, ge=1, description="/dev/shm size; NCCL needs more than LXC's 64 MiB")
    ssh: SshAccess = SshAccess()
    passthrough: Passthrough = Field(
        "auto",
        description="how GPUs reach the container: devN entries (PVE >= 8.1), raw lxc lines, "
        "or auto (devN when the node supports it)",
    )
    nvidia_driver: NvidiaDriver = Field(
        "install",
        description="the NVIDIA userspace driver inside a container with GPUs: install (make it "
        "the node's exact version with the .run installer, --no-kernel-module, then check "
        "nvidia-smi sees every GPU), expect-present (never install; check the container already "
        "has the node's version and sees every GPU, and fail if not), or skip (neither install "
        "nor check; the plan still shows the steps, marked not applied: for nodes whose GPU "
        "device nodes have no driver behind them, like the lab's)",
    )

    @field_validator("vmid")
    @classmethod
    def _vmid_range(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 100 <= value <= 999_999_999:
            raise ValueError("vmid must be between 100 and 999999999 (or auto)")
        return value

    @field_validator("template")
    @classmethod
    def _template_volid(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][\w.-]*:vztmpl/[\w.+-]+", value):
            raise ValueError("template must be a volume id like local:vztmpl/NAME.tar.zst")
        return value

    @field_validator("gpus")
    @classmethod
    def _unique_gpus(cls, value: list[int] | str) -> list[int] | str:
        if isinstance(value, list):
            if any(i < 0 for i in value):
                raise ValueError("GPU indices are >= 0")
            if len(set(value)) != len(value):
                raise ValueError("GPU indices must be unique")
        return value

    @property
    def ssh_host(self) -> str | None:
        """Where to SSH: an explicit ``ssh.host``, else the static address."""
        return self.ssh.host or self.network.address


class Group(Strict):
    """A named set of container defaults; containers join with ``groups: [NAME]``."""

    vars: ContainerVars = ContainerVars()


class InventoryFile(Strict):
    """The document as written (before defaults and groups are merged into containers)."""

    version: Literal[1] = 1
    clusters: dict[Name, Cluster] = Field(min_length=1)
    defaults: ContainerVars = ContainerVars()
    groups: dict[Name, Group] = {}
    containers: dict[Name, ContainerEntry | None] = {}
