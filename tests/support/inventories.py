"""Small hand-written inventories for tests: of hostile input (one cluster, one container; the
layout is fixed so error messages can name lines: ``timeout_s`` is line 5, ``auth`` line 6, after
any ``cluster`` extra lines), and the cluster block for a PVE double in the test's process.
"""

from __future__ import annotations

import socket
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dflashops.lab.pve import PveDouble


def closed_port() -> int:
    """A local port nothing listens on (bound, then released): connecting is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def inventory_text(
    cluster: str = "",
    container: str = "{vmid: 901}",
    api_url: str | None = None,
    password: str = "{env: G_PVE_PW}",
) -> str:
    """Cluster ``c1`` (node ``n1``) and container ``ct1`` (``container``: its YAML flow
    mapping); ``cluster`` holds extra lines of the cluster's mapping; ``api_url`` defaults to a
    closed local port, so a command that reaches PVE fails at once and nothing leaves."""
    url = api_url if api_url is not None else f"https://127.0.0.1:{closed_port()}"
    return textwrap.dedent(
        f"""\
        version: 1
        clusters:
          c1:
            api_url: {url}
            timeout_s: 2
        {{EXTRA}}
            auth: {{user: root@pam, password: {password}}}
            nodes: {{n1: {{}}}}
        containers:
          ct1: {container}
        """
    ).replace("{EXTRA}\n", textwrap.indent(f"{cluster}\n", "    ") if cluster else "")


def write_inventory(
    tmp_path: Path,
    cluster: str = "",
    container: str = "{vmid: 901}",
    api_url: str | None = None,
    password: str = "{env: G_PVE_PW}",
) -> Path:
    """:func:`inventory_text` written to ``tmp_path/inv.yaml``."""
    path = tmp_path / "inv.yaml"
    path.write_text(inventory_text(cluster, container, api_url, password))
    return path


# Two GPU nodes with containers of 2, 2 and 4 GPUs and one with `gpus: all`: the
# placement tests' inventory (members, splits, systemd units)
PLACEMENT_INVENTORY = """\
version: 1
clusters:
  pve:
    api_url: https://127.0.0.1:8006
    auth: {user: root@pam, password: {env: PVE_PASSWORD}}
    nodes: {n1: {ssh: {host: 127.0.0.1}}, n2: {ssh: {host: 127.0.0.1}}}
defaults: {cluster: pve, node: n1}
containers:
  gpu-a: {vmid: 201, network: {ip: 10.200.1.21/24}, gpus: [0, 1]}
  gpu-b: {vmid: 202, node: n2, network: {ip: 10.200.1.22/24}, gpus: [0, 1]}
  gpu-c: {vmid: 203, node: n2, network: {ip: 10.200.1.23/24}, gpus: [0, 1, 2, 3]}
  gpu-all: {vmid: 204, network: {ip: 10.200.1.24/24}, gpus: all}
  cpu-a: {vmid: 205, network: {ip: 10.200.1.25/24}}
  cpu-b: {vmid: 206, node: n2, network: {ip: 10.200.1.26/24}}
  dhcp: {vmid: 207, network: {ip: dhcp}}
  same-ip: {vmid: 208, node: n2, network: {ip: 10.200.1.25/24}}
"""


def double_cluster(double: PveDouble, folder: Path) -> dict[str, Any]:
    """The inventory's ``clusters`` entry for ``double`` (node ``lab``, root@pam), its password
    written to ``folder/pw`` (mode 600) as an operator keeps one."""
    password = folder / "pw"
    password.write_text(double.credentials.password)
    password.chmod(0o600)
    return {
        "api_url": double.url,
        "ca_file": str(double.ca_path),
        "auth": {"user": "root@pam", "password": {"file": str(password)}},
        "nodes": {"lab": {}},
    }
