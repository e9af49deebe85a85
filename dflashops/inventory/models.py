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
    model_validator,
)

from dflashops.secrets import SecretRef

NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
Name = Annotated[str, Field(pattern=NAME_RE)]
# Values written into PVE property strings (``net0: name=eth0,bridge=X``, ``mp0: HOST,mp=PATH``)
# must not carry that syntax: a ``,`` or ``=`` would add properties of the writer's choosing.
BRIDGE_RE = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$"  # a Linux interface name (IFNAMSIZ 16)
STORAGE_RE = r"^[A-Za-z][A-Za-z0-9_.-]*$"  # PVE's pve-storage-id
PROPERTY_UNSAFE = re.compile(r"[,=\s\x00-\x1f\x7f]")
MANAGED_TAG = "dflashops"
DEFAULT_PARALLEL = 8  # containers a command works on at once (Terraform's default is 10)
MAX_PARALLEL = 64
Passthrough = Literal["auto", "devN", "raw"]
NvidiaDriver = Literal["install", "expect-present", "skip"]


class Strict(BaseModel):
    """Base: unknown keys are errors, values are immutable after validation."""

    # allow_inf_nan: ``timeout_s: .inf`` is a typo or an attack, never a setting
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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
    """Pick the auth model by its keys, so errors speak of the one the user meant.

    The tags are model names, never key names: pydantic puts the tag into error locations, and a
    tag equal to a key (``password``) would make the location read ``auth.password.password``.
    """
    if isinstance(value, dict):
        return "TokenAuth" if {"token_name", "token_secret"} & value.keys() else "PasswordAuth"
    return "TokenAuth" if isinstance(value, TokenAuth) else "PasswordAuth"


Auth = Annotated[
    Annotated[TokenAuth, Tag("TokenAuth")] | Annotated[PasswordAuth, Tag("PasswordAuth")],
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
    timeout_s: float = Field(15.0, gt=0, description="per API call; a hung API fails after it")
    auth: Auth
    nodes: dict[Name, Node] = Field(min_length=1)

    @field_validator("api_url")
    @classmethod
    def _https_only(cls, url: HttpUrl) -> HttpUrl:
        if url.scheme != "https":
            raise ValueError("the PVE API is served over https")
        if url.username is not None or url.password is not None:
            # the URL is printed (inventory show, errors); credentials go under auth:
            raise ValueError("api_url must not carry user:password@; put credentials under auth")
        if url.port == 0:
            raise ValueError("api_url port 0 is not a port (PVE listens on 8006)")
        return url

    @model_validator(mode="after")
    def _tls_consistent(self) -> Cluster:
        if self.ca_file is not None and not self.verify_tls:
            raise ValueError(
                "ca_file with verify_tls: false is contradictory: the CA would never be used"
            )
        return self

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

    @field_validator("bridge")
    @classmethod
    def _bridge_name(cls, value: str) -> str:
        if not re.fullmatch(BRIDGE_RE, value):
            raise ValueError(
                "bridge must be an interface name (letters, digits, _ . -, at most 15), "
                "without commas or '='"
            )
        return value

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
        if PROPERTY_UNSAFE.search(str(value)):
            raise ValueError("must not contain commas, '=', spaces or control characters")
        return value


class ContainerVars(Strict):
    """Container fields that defaults and groups may set (all optional)."""

    cluster: Name | None = None
    node: Name | None = None
    template: str | None = None
    storage: str | None = Field(None, pattern=STORAGE_RE)
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
    storage: str = Field("local-lvm", pattern=STORAGE_RE)
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

    @field_validator("nameserver")
    @classmethod
    def _nameservers(cls, value: str | None) -> str | None:
        if value is not None:
            for address in value.split():
                try:
                    ipaddress.ip_address(address)
                except ValueError:
                    raise ValueError("nameserver must be IP addresses, space-separated") from None
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
    parallel: int = Field(
        DEFAULT_PARALLEL,
        ge=1,
        le=MAX_PARALLEL,
        description="how many containers status, provision, destroy and up work on at once "
        "(--parallel N overrides it)",
    )
    clusters: dict[Name, Cluster] = Field(min_length=1)
    defaults: ContainerVars = ContainerVars()
    groups: dict[Name, Group] = {}
    containers: dict[Name, ContainerEntry | None] = {}
