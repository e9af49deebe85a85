"""Load an inventory file and merge container fields: defaults < group < container < ``--set``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dflashops.errors import InventoryError, SecretError, UnknownNameError
from dflashops.inventory.models import (
    DEFAULT_PARALLEL,
    Cluster,
    Container,
    InventoryFile,
    Node,
    PasswordAuth,
)
from dflashops.overrides import Override, deep_merge, parse_overrides
from dflashops.pydantic_errors import Loc, dotted, first_error
from dflashops.secrets import SecretRef
from dflashops.yamldoc import YamlDoc, load_yaml_file, validate_doc


@dataclass(frozen=True)
class Inventory:
    """A validated, merged inventory. Secrets stay references until :meth:`secret` is called."""

    path: Path
    clusters: Mapping[str, Cluster]
    containers: Mapping[str, Container]
    doc: YamlDoc
    #: the operator's ``--skip-pve-check`` for this run: reach containers at the inventory's
    #: address without asking PVE that they are ones dflashops manages (PVE is down)
    pve_check_skipped: bool = False
    #: how many containers a command works on at once (``parallel:``; ``--parallel`` wins)
    parallel: int = DEFAULT_PARALLEL

    def without_pve_check(self) -> Inventory:
        """This inventory, trusted without asking PVE (see :attr:`pve_check_skipped`)."""
        return replace(self, pve_check_skipped=True)

    def container(self, name: str) -> Container:
        try:
            return self.containers[name]
        except KeyError:
            known = ", ".join(sorted(self.containers)) or "none"
            raise UnknownNameError(
                f"{self.path}: no container named {name!r} (defined: {known})"
            ) from None

    def select(self, names: Iterable[str]) -> list[Container]:
        """The named containers in the given order, or all of them when no name is given."""
        wanted = list(names)
        return [self.container(n) for n in wanted] if wanted else list(self.containers.values())

    def cluster_of(self, container: Container) -> Cluster:
        return self.clusters[container.cluster]

    def node_of(self, container: Container) -> Node:
        return self.clusters[container.cluster].nodes[container.node]

    def pve_node_name(self, container: Container) -> str:
        return self.node_of(container).pve_name or container.node

    def secret(self, cluster_name: str, environ: dict[str, str] | None = None) -> str:
        """The cluster's API secret; a missing one names file:line:key, never the value."""
        cluster = self.clusters[cluster_name]
        field = "password" if isinstance(cluster.auth, PasswordAuth) else "token_secret"
        ref: SecretRef = getattr(cluster.auth, field)
        try:
            return ref.reveal(environ)
        except SecretError as exc:
            loc: Loc = ("clusters", cluster_name, "auth", field)
            raise InventoryError(
                exc.message, source=str(self.path), line=self.doc.line_of(loc), key=dotted(loc)
            ) from None

    def check_secrets(self, environ: dict[str, str] | None = None) -> None:
        """Resolve every cluster's secret once; the first missing one raises."""
        for name in self.clusters:
            self.secret(name, environ)

    def redacted(self) -> dict[str, Any]:
        """The merged inventory as plain data with secrets shown only as their references."""
        return {
            "path": str(self.path),
            "parallel": self.parallel,
            "clusters": {
                name: cluster.model_dump(mode="json") for name, cluster in self.clusters.items()
            },
            "containers": {
                name: ct.model_dump(mode="json") for name, ct in self.containers.items()
            },
        }


def load_inventory(path: Path, overrides: Iterable[str | Override] = ()) -> Inventory:
    """Read, validate and merge ``path``. ``overrides`` are ``CONTAINER.key=value`` strings."""
    doc = load_yaml_file(path, InventoryError)
    if not isinstance(doc.data, dict):
        raise InventoryError("the inventory must be a mapping", source=doc.source, line=1)
    parsed = validate_doc(InventoryFile, doc.data, doc, InventoryError)
    per_container = _overrides_by_container(overrides, parsed)
    containers = {
        name: _merge_container(name, parsed, doc, per_container.get(name, []))
        for name in parsed.containers
    }
    return Inventory(
        path=path,
        clusters=parsed.clusters,
        containers=containers,
        doc=doc,
        parallel=parsed.parallel,
    )


def _overrides_by_container(
    overrides: Iterable[str | Override], parsed: InventoryFile
) -> dict[str, list[Override]]:
    items = [o for o in overrides if isinstance(o, Override)]
    items += parse_overrides((o for o in overrides if isinstance(o, str)), InventoryError)
    grouped: dict[str, list[Override]] = {}
    for ov in items:
        if len(ov.path) < 2 or ov.path[0] not in parsed.containers:
            raise InventoryError(
                "inventory overrides are CONTAINER.key=value for a defined container",
                source="--set",
                key=ov.key,
            )
        grouped.setdefault(ov.path[0], []).append(Override(ov.path[1:], ov.value, ov.text))
    return grouped


def _merge_container(
    name: str, parsed: InventoryFile, doc: YamlDoc, overrides: list[Override]
) -> Container:
    raw = doc.data
    own: dict[str, Any] = dict((raw.get("containers") or {}).get(name) or {})
    layers: list[tuple[Loc | None, dict[str, Any]]] = [
        (("defaults",), dict(raw.get("defaults") or {}))
    ]
    for group in own.get("groups") or []:
        if group not in parsed.groups:
            loc: Loc = ("containers", name, "groups")
            raise InventoryError(
                f"unknown group {group!r}",
                source=doc.source,
                line=doc.line_of(loc),
                key=dotted(loc),
            )
        group_vars = ((raw.get("groups") or {}).get(group) or {}).get("vars") or {}
        layers.append((("groups", group, "vars"), dict(group_vars)))
    layers.append((("containers", name), own))
    for ov in overrides:
        layers.append((None, _nested(ov.path, ov.value)))

    merged: dict[str, Any] = {"name": name}
    origin: dict[str, Loc | None] = {"name": ("containers", name)}
    for base, values in layers:
        merged = deep_merge(merged, values)
        origin.update(dict.fromkeys(values, base))
    _default_placement(name, merged, parsed, doc)
    try:
        return Container.model_validate(merged)
    except ValidationError as exc:
        loc, reason = first_error(exc, merged)
        base = origin.get(str(loc[0])) if loc else ("containers", name)
        if base is None:
            raise InventoryError(reason, source="--set", key=f"{name}.{dotted(loc)}") from None
        full = (*base, *loc)
        raise InventoryError(
            reason, source=doc.source, line=doc.line_of(full), key=dotted(full)
        ) from None


def _nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: dict[str, Any] = {path[-1]: value}
    for part in reversed(path[:-1]):
        out = {part: out}
    return out


def _default_placement(
    name: str, merged: dict[str, Any], parsed: InventoryFile, doc: YamlDoc
) -> None:
    """Fill ``cluster``/``node`` when there is only one choice; check they exist otherwise."""
    loc: Loc = ("containers", name)

    def error(reason: str, key: str) -> InventoryError:
        return InventoryError(
            reason, source=doc.source, line=doc.line_of((*loc, key)), key=f"{dotted(loc)}.{key}"
        )

    if merged.get("cluster") is None:
        if len(parsed.clusters) != 1:
            raise error("cluster is required when the inventory has several", "cluster")
        merged["cluster"] = next(iter(parsed.clusters))
    cluster = parsed.clusters.get(str(merged["cluster"]))
    if cluster is None:
        raise error(f"unknown cluster {merged['cluster']!r}", "cluster")
    if merged.get("node") is None:
        if len(cluster.nodes) != 1:
            raise error("node is required when the cluster has several", "node")
        merged["node"] = next(iter(cluster.nodes))
    if merged["node"] not in cluster.nodes:
        raise error(f"unknown node {merged['node']!r} in cluster {merged['cluster']!r}", "node")
