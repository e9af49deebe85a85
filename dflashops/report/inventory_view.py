"""Rich tables for ``inventory show``."""

from __future__ import annotations

from rich.table import Table

from dflashops.inventory.load import Inventory
from dflashops.inventory.models import PasswordAuth


def inventory_tables(inv: Inventory) -> list[Table]:
    """One table of clusters/nodes and one of containers; secrets appear only as references."""
    clusters = Table(title=f"Clusters ({inv.path})")
    for col in ("cluster", "api", "tls", "auth", "secret", "node", "ssh"):
        clusters.add_column(col)
    for name, cluster in inv.clusters.items():
        auth = cluster.auth
        secret = auth.password if isinstance(auth, PasswordAuth) else auth.token_secret
        kind = (
            f"password {auth.user}"
            if isinstance(auth, PasswordAuth)
            else f"token {auth.user}!{auth.token_name}"
        )
        tls = "verify" if cluster.verify_tls else "NOT verified"
        if cluster.ca_file:
            tls += f" (CA {cluster.ca_file})"
        for node_name, node in cluster.nodes.items():
            ssh = node.ssh
            clusters.add_row(
                name,
                str(cluster.api_url),
                tls,
                kind,
                secret.describe(),
                node.pve_name or node_name,
                f"{ssh.user}@{ssh.host or '?'}:{ssh.port}",
            )
    containers = Table(title="Containers")
    for col in ("name", "vmid", "node", "cores", "memory", "rootfs", "net", "gpus", "mounts"):
        containers.add_column(col)
    for ct in inv.containers.values():
        gpus = ct.gpus if isinstance(ct.gpus, str) else ",".join(map(str, ct.gpus)) or "-"
        containers.add_row(
            ct.name,
            str(ct.vmid),
            f"{ct.cluster}/{ct.node}",
            str(ct.cores),
            f"{ct.memory_mb} MiB",
            f"{ct.storage}:{ct.rootfs_gb}G",
            f"{ct.network.bridge} {ct.network.ip}",
            gpus,
            "\n".join(f"{m.host_path} -> {m.path}" for m in ct.mounts) or "-",
        )
    return [clusters, containers]
