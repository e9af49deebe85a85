"""The container plan: wanted (inventory) vs actual (PVE), field by field, and the steps to apply.

:func:`plan_container` is pure: facts in, a :class:`ContainerPlan` out (rows for the table, ordered
steps for :mod:`dflashops.proxmox.apply`, or a refusal). Nothing here talks to PVE or SSH.

Safety rules, checked before anything else: a container is only ever changed when it carries
the ``dflashops`` tag *and* its name matches; anything else under our name or vmid is refused
with one line naming the vmid and what differs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from dflashops.inventory.models import MANAGED_TAG, Container
from dflashops.proxmox.client import version_tuple
from dflashops.proxmox.facts import ExistingCt, HostFacts, Resource, SiteFacts, split_tags
from dflashops.proxmox.passthrough import (
    PassthroughPlan,
    devn_changes,
    parse_devn,
    plan_passthrough,
    raw_changes,
)

RowStatus = Literal["create", "change", "remove", "unchanged", "differs", "refused", "absent"]
Action = Literal["create", "change", "unchanged", "refused"]
# options PVE applies to a running container at once (vmconfig_hotplug_pending); others wait for
# the next start. New mpN/devN are hot-plugged too, changed ones are not.
HOTPLUG = frozenset(
    ("description", "onboot", "startup", "protection", "hostname", "hookscript", "cores", "tags")
) | {"memory", "swap", "cpulimit", "cpuunits"}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)([KMGT]?)")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class Row(BaseModel):
    """One line of the plan table."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    field: str
    wanted: str
    actual: str = ""
    status: RowStatus
    via: str = ""
    note: str = ""


# --------------------------------------------------------------------------- steps


@dataclass(frozen=True)
class DownloadTemplate:
    storage: str
    template: str

    def describe(self) -> str:
        return f"download template {self.template} to {self.storage} (aplinfo)"


@dataclass(frozen=True)
class CreateCt:
    params: tuple[tuple[str, str], ...]
    vmid: int | None  # None: allocate with nextid

    def describe(self) -> str:
        where = f"vmid {self.vmid}" if self.vmid is not None else "vmid from nextid"
        return f"create container ({where})"


@dataclass(frozen=True)
class UpdateConfig:
    params: tuple[tuple[str, str], ...]
    delete: tuple[str, ...]
    digest: str

    def describe(self) -> str:
        keys = [k for k, _ in self.params] + [f"-{k}" for k in self.delete]
        return f"update config via API ({', '.join(keys)}; digest {self.digest[:10]})"


@dataclass(frozen=True)
class PctSet:
    options: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return "pct set over SSH (" + ", ".join(k for k, _ in self.options) + ")"


@dataclass(frozen=True)
class EditConf:
    """Lines added to / removed from the main section of the config file, over SSH."""

    add: tuple[str, ...]
    remove: tuple[str, ...]

    def describe(self) -> str:
        return f"edit the config file over SSH (+{len(self.add)} / -{len(self.remove)} lines)"


@dataclass(frozen=True)
class StartCt:
    def describe(self) -> str:
        return "start"


@dataclass(frozen=True)
class RebootCt:
    reason: str

    def describe(self) -> str:
        return f"restart ({self.reason})"


Step = DownloadTemplate | CreateCt | UpdateConfig | PctSet | EditConf | StartCt | RebootCt


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class PlanInputs:
    """Everything a container's plan depends on."""

    container: Container
    node: str  # the PVE node name
    can_set_devices: bool  # root@pam with a password: devN and bind mounts through the API
    ssh_public_key: str | None
    site: SiteFacts
    host: HostFacts | None = None  # probed over SSH when the container wants GPUs
    resources: tuple[Resource, ...] = ()
    existing: ExistingCt | None = None


@dataclass
class ContainerPlan:
    name: str
    node: str
    vmid: int | None
    action: Action
    rows: list[Row] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    host_fixes: list[str] = field(default_factory=list)
    passthrough: str = "none"

    @property
    def refused(self) -> bool:
        return self.action == "refused"

    def refusal(self) -> str:
        """One line: the container, its vmid and what is wrong."""
        vmid = f" (vmid {self.vmid})" if self.vmid is not None else ""
        text = f"{self.name}{vmid}: refused: {'; '.join(self.issues)}"
        if self.host_fixes:
            text += f" (host fix: {'; '.join(self.host_fixes)})"
        return text


def locate(ct: Container, resources: Sequence[Resource]) -> tuple[Resource | None, list[str]]:
    """The container dflashops manages under this name (None: create one), or refusals.

    Hostnames are not unique in PVE, vmids are; both must agree with the inventory and the
    container must carry the ``dflashops`` tag before anything touches it.
    """
    same_name = sorted((r for r in resources if r.name == ct.name), key=lambda r: r.vmid)
    strangers = [r for r in same_name if not r.managed]
    issues = [
        f"vmid {r.vmid} is named {ct.name!r} but lacks the {MANAGED_TAG!r} tag "
        "(not created by dflashops; left untouched)"
        for r in strangers
    ]
    if isinstance(ct.vmid, int):
        at_vmid = next((r for r in resources if r.vmid == ct.vmid), None)
        if at_vmid is not None and at_vmid.lock == "create" and at_vmid.name != ct.name:
            issues.append(f"vmid {ct.vmid} is being created by someone (lock: create)")
        elif at_vmid is not None and at_vmid.name != ct.name:
            issues.append(f"vmid {ct.vmid} is named {at_vmid.name!r}, not {ct.name!r}")
        elif at_vmid is not None and not at_vmid.managed and at_vmid not in strangers:
            issues.append(f"vmid {ct.vmid} ({at_vmid.name}) lacks the {MANAGED_TAG!r} tag")
        others = [r for r in same_name if r.vmid != ct.vmid and r.managed]
        issues += [
            f"{ct.name} already exists as vmid {r.vmid} (the inventory says {ct.vmid})"
            for r in others
        ]
        return (at_vmid if not issues else None), issues
    if issues:
        return None, issues
    managed = [r for r in same_name if r.managed]
    # several: a concurrent auto-vmid create that is being cleaned up; the lowest vmid wins
    return (managed[0] if managed else None), []


def plan_container(inputs: PlanInputs) -> ContainerPlan:
    ct = inputs.container
    found, issues = locate(ct, inputs.resources)
    existing = inputs.existing if found is not None else None
    vmid = found.vmid if found is not None else (ct.vmid if isinstance(ct.vmid, int) else None)
    node = found.node if found is not None else inputs.node
    plan = ContainerPlan(name=ct.name, node=node, vmid=vmid, action="unchanged")
    if issues:
        plan.action = "refused"
        plan.issues = issues
        return plan
    if found is not None and found.node != inputs.node:
        plan.warnings.append(f"lives on node {found.node}, the inventory says {inputs.node}")
    if existing is not None and existing.lock:
        plan.warnings.append(f"locked ({existing.lock}): apply waits for the lock")
    if not inputs.ssh_public_key:
        plan.issues.append("ssh.key_file is not set (or its .pub is missing): no way to log in")
    pt = plan_passthrough(ct, inputs.host, can_set_devices=inputs.can_set_devices)
    plan.passthrough = pt.method
    plan.issues += list(pt.issues)
    plan.host_fixes += list(pt.host_fixes)
    plan.warnings += list(pt.notes)
    if existing is None:
        _plan_create(inputs, plan, pt)
    else:
        _plan_change(inputs, existing, plan, pt)
    if plan.issues:
        plan.action = "refused"
        plan.steps = []  # nothing happens to a refused container
    elif existing is None:
        plan.action = "create"
    else:
        plan.action = "change" if plan.steps else "unchanged"
    return plan


# --------------------------------------------------------------------------- wanted values


def net0(ct: Container) -> dict[str, str]:
    net = {"name": "eth0", "bridge": ct.network.bridge, "ip": ct.network.ip}
    if ct.network.gateway:
        net["gw"] = ct.network.gateway
    if ct.network.vlan:
        net["tag"] = str(ct.network.vlan)
    return net


def mount_value(host_path: str, path: str, read_only: bool) -> str:
    return f"{host_path},mp={path}" + (",ro=1" if read_only else "")


def wanted_basics(ct: Container) -> dict[str, str]:
    """Options every managed container has, as PVE spells them (create and compare)."""
    values = {
        "hostname": ct.name,
        "cores": str(ct.cores),
        "memory": str(ct.memory_mb),
        "swap": str(ct.swap_mb),
        "net0": render_props(net0(ct)),
        "features": "nesting=1",
        "onboot": "1" if ct.onboot else "0",
        "tags": MANAGED_TAG,
    }
    if ct.nameserver:
        values["nameserver"] = ct.nameserver
    return values


def parse_props(value: str, default_key: str | None = None) -> dict[str, str]:
    """A PVE property string (``a=1,b=2``; a leading bare item is ``default_key``)."""
    props: dict[str, str] = {}
    for index, part in enumerate(value.split(",")):
        if not part:
            continue
        key, sep, val = part.partition("=")
        if not sep and index == 0 and default_key:
            props[default_key] = part
        else:
            props[key.strip()] = val.strip()
    return props


def render_props(props: Mapping[str, str], default_key: str | None = None) -> str:
    parts = []
    if default_key and default_key in props:
        parts.append(props[default_key])
    parts += [f"{k}={v}" for k, v in props.items() if k != default_key]
    return ",".join(parts)


def _size_gib(text: str) -> float | None:
    match = _SIZE.fullmatch(text.strip().upper())
    if not match:
        return None
    return float(match.group(1)) * _UNITS[match.group(2)] / (1 << 30)


# --------------------------------------------------------------------------- create


def _plan_create(inputs: PlanInputs, plan: ContainerPlan, pt: PassthroughPlan) -> None:
    ct, site = inputs.container, inputs.site
    api_params: dict[str, str] = {"ostemplate": ct.template}
    rows: list[Row] = []
    template_step = _template_step(ct, site, plan, rows)
    storage = site.storage(ct.storage)
    if storage is None:
        plan.issues.append(f"storage {ct.storage!r} does not exist on node {inputs.node}")
    elif "rootdir" not in storage.content:
        plan.issues.append(f"storage {ct.storage!r} cannot hold container volumes (rootdir)")
    api_params["rootfs"] = f"{ct.storage}:{ct.rootfs_gb}"
    rows.append(Row(field="rootfs", wanted=f"{ct.storage}:{ct.rootfs_gb}G", status="create"))
    for key, value in wanted_basics(ct).items():
        api_params[key] = value
        rows.append(Row(field=key, wanted=value, status="create", via="api"))
    api_params["unprivileged"] = "1" if ct.unprivileged else "0"
    rows.append(Row(field="unprivileged", wanted=api_params["unprivileged"], status="create"))
    if inputs.ssh_public_key:
        api_params["ssh-public-keys"] = inputs.ssh_public_key
        rows.append(
            Row(field="ssh-public-keys", wanted=_key_label(inputs.ssh_public_key), status="create")
        )
    pct: dict[str, str] = {}
    for index, mount in enumerate(ct.mounts):
        key = f"mp{index}"
        value = mount_value(str(mount.host_path), str(mount.path), mount.read_only)
        via = "api" if inputs.can_set_devices else "pct set"
        (api_params if inputs.can_set_devices else pct)[key] = value
        rows.append(Row(field=key, wanted=value, status="create", via=via))
    edit: list[str] = []
    if pt.method in ("devN-api", "devN-pct"):
        target = api_params if pt.method == "devN-api" else pct
        for index, (_path, value) in enumerate(pt.devn):
            target[f"dev{index}"] = value
            rows.append(Row(field=f"dev{index}", wanted=value, status="create", via=pt.via))
    elif pt.method == "raw":
        for key, value in pt.raw_lines:
            edit.append(f"{key}: {value}")
            rows.append(Row(field=key, wanted=value, status="create", via=pt.via))
    rows += _refused_rows(pt)
    rows.append(Row(field="state", wanted="running", status="create"))
    plan.rows = rows
    if template_step is not None:
        plan.steps.append(template_step)
    vmid = inputs.container.vmid
    plan.steps.append(CreateCt(tuple(api_params.items()), vmid if isinstance(vmid, int) else None))
    if pct:
        plan.steps.append(PctSet(tuple(pct.items())))
    if edit:
        plan.steps.append(EditConf(tuple(edit), ()))
    plan.steps.append(StartCt())


def _template_step(
    ct: Container, site: SiteFacts, plan: ContainerPlan, rows: list[Row]
) -> DownloadTemplate | None:
    if ct.template in site.templates:
        rows.append(Row(field="template", wanted=ct.template, actual="present", status="unchanged"))
        return None
    storage, _, path = ct.template.partition(":")
    name = path.removeprefix("vztmpl/")
    holder = site.storage(storage)
    if name not in site.appliances:
        plan.issues.append(
            f"template {ct.template} is not on storage {storage} and not in the appliance index"
        )
    elif holder is None or "vztmpl" not in holder.content:
        plan.issues.append(f"storage {storage!r} does not hold templates (vztmpl)")
    rows.append(
        Row(field="template", wanted=ct.template, actual="absent", status="create", via="aplinfo")
    )
    return DownloadTemplate(storage, name)


def _key_label(keys: str) -> str:
    first = keys.strip().splitlines()[0].split() if keys.strip() else []
    label = first[2] if len(first) > 2 else (first[0] if first else "")
    count = len([line for line in keys.splitlines() if line.strip()])
    return f"{count} key(s) ({label})"


# --------------------------------------------------------------------------- change


def _plan_change(
    inputs: PlanInputs, existing: ExistingCt, plan: ContainerPlan, pt: PassthroughPlan
) -> None:
    ct = inputs.container
    config = existing.config
    rows: list[Row] = []
    api: dict[str, str] = {}
    pct: dict[str, str] = {}
    delete: list[str] = []
    add_lines: list[str] = []
    remove_lines: list[str] = []

    def compare(key: str, wanted: str, actual: str, equal: bool, via: str = "api") -> None:
        if equal:
            rows.append(Row(field=key, wanted=wanted, actual=actual, status="unchanged"))
            return
        rows.append(Row(field=key, wanted=wanted, actual=actual, status="change", via=via))
        api[key] = wanted

    basics = wanted_basics(ct)
    rows.append(Row(field="hostname", wanted=ct.name, actual=existing.name, status="unchanged"))
    for key in ("cores", "memory", "swap", "onboot"):
        actual = _text(config.get(key))
        compare(key, basics[key], actual, basics[key] == actual)
    _compare_net(basics["net0"], config, compare)
    if "nameserver" in basics:
        actual = _text(config.get("nameserver"))
        compare("nameserver", basics["nameserver"], actual, basics["nameserver"] == actual)
    features = parse_props(_text(config.get("features")))
    if features.get("nesting") == "1":
        rows.append(
            Row(
                field="features",
                wanted="nesting=1",
                actual=render_props(features),
                status="unchanged",
            )
        )
    else:
        new = render_props({**features, "nesting": "1"})
        rows.append(
            Row(
                field="features",
                wanted="nesting=1",
                actual=render_props(features),
                status="change",
                via="api",
            )
        )
        api["features"] = new
    tags = split_tags(_text(config.get("tags")))
    rows.append(Row(field="tags", wanted=MANAGED_TAG, actual=";".join(tags), status="unchanged"))
    _compare_fixed(ct, config, rows, plan)
    _compare_mounts(inputs, config, rows, api, pct)
    raw_changed = _compare_passthrough(
        inputs,
        existing,
        pt,
        rows=rows,
        api=api,
        pct=pct,
        delete=delete,
        add_lines=add_lines,
        remove_lines=remove_lines,
    )
    plan.rows = rows
    if api or delete:
        plan.steps.append(UpdateConfig(tuple(api.items()), tuple(delete), existing.digest))
    if pct:
        plan.steps.append(PctSet(tuple(pct.items())))
    if add_lines or remove_lines:
        plan.steps.append(EditConf(tuple(add_lines), tuple(remove_lines)))
    if not existing.running:
        rows.append(Row(field="state", wanted="running", actual=existing.status, status="change"))
        plan.steps.append(StartCt())
        return
    reasons = _restart_reasons(existing, api, pct, delete, raw_changed)
    if reasons:
        rows.append(
            Row(
                field="state",
                wanted="running",
                actual="running",
                status="change",
                note="restart: " + "; ".join(reasons),
            )
        )
        plan.steps.append(RebootCt("; ".join(reasons)))
    else:
        rows.append(Row(field="state", wanted="running", actual="running", status="unchanged"))


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _compare_net(
    wanted: str, config: Mapping[str, Any], compare: Callable[[str, str, str, bool], None]
) -> None:
    actual_text = _text(config.get("net0"))
    actual = parse_props(actual_text)
    want = parse_props(wanted)
    managed = ("name", "bridge", "ip", "gw", "tag")
    same = all(actual.get(k) == want.get(k) for k in managed)
    shown = render_props({k: actual[k] for k in managed if k in actual})
    if same:
        compare("net0", wanted, shown, True)
        return
    # keep the MAC (and anything else not managed here) so the container keeps its address
    kept = {k: v for k, v in actual.items() if k not in managed}
    compare("net0", render_props({**want, **kept}), shown, False)


def _compare_fixed(
    ct: Container, config: Mapping[str, Any], rows: list[Row], plan: ContainerPlan
) -> None:
    """Options that cannot change after create: shown, never changed."""
    unpriv = "1" if _text(config.get("unprivileged")) == "1" else "0"
    wanted = "1" if ct.unprivileged else "0"
    if unpriv == wanted:
        rows.append(Row(field="unprivileged", wanted=wanted, actual=unpriv, status="unchanged"))
    else:
        rows.append(
            Row(
                field="unprivileged",
                wanted=wanted,
                actual=unpriv,
                status="differs",
                note="fixed at create: destroy and provision again to change",
            )
        )
        plan.warnings.append(f"unprivileged is {unpriv}, the inventory says {wanted} (not changed)")
    rootfs = parse_props(_text(config.get("rootfs")), "volume")
    storage = rootfs.get("volume", "").partition(":")[0]
    size = _size_gib(rootfs.get("size", "")) or 0.0
    actual = f"{storage}:{size:g}G"
    wanted_rootfs = f"{ct.storage}:{ct.rootfs_gb}G"
    if storage == ct.storage and size >= ct.rootfs_gb:
        rows.append(Row(field="rootfs", wanted=wanted_rootfs, actual=actual, status="unchanged"))
        return
    note = (
        f"grow it with `pct resize VMID rootfs {ct.rootfs_gb}G`"
        if storage == ct.storage
        else "moving storage is not done by provision"
    )
    rows.append(
        Row(field="rootfs", wanted=wanted_rootfs, actual=actual, status="differs", note=note)
    )
    plan.warnings.append(f"rootfs is {actual}, the inventory says {wanted_rootfs} ({note})")


def _compare_mounts(
    inputs: PlanInputs,
    config: Mapping[str, Any],
    rows: list[Row],
    api: dict[str, str],
    pct: dict[str, str],
) -> None:
    actual = {
        key: parse_props(_text(value), "volume")
        for key, value in config.items()
        if re.fullmatch(r"mp\d+", key)
    }
    used = set(actual)
    via = "api" if inputs.can_set_devices else "pct set"
    for mount in inputs.container.mounts:
        wanted = mount_value(str(mount.host_path), str(mount.path), mount.read_only)
        key = next((k for k, p in actual.items() if p.get("mp") == str(mount.path)), None)
        if key is None:
            key = next(f"mp{i}" for i in range(256) if f"mp{i}" not in used)
            used.add(key)
            rows.append(Row(field=key, wanted=wanted, status="create", via=via))
            (api if inputs.can_set_devices else pct)[key] = wanted
            continue
        have = actual[key]
        shown = render_props(have, "volume")
        same = have.get("volume") == str(mount.host_path) and (have.get("ro") == "1") == (
            mount.read_only
        )
        if same:
            rows.append(Row(field=key, wanted=wanted, actual=shown, status="unchanged"))
        else:
            rows.append(Row(field=key, wanted=wanted, actual=shown, status="change", via=via))
            (api if inputs.can_set_devices else pct)[key] = wanted


def _compare_passthrough(
    inputs: PlanInputs,
    existing: ExistingCt,
    pt: PassthroughPlan,
    *,
    rows: list[Row],
    api: dict[str, str],
    pct: dict[str, str],
    delete: list[str],
    add_lines: list[str],
    remove_lines: list[str],
) -> bool:
    """Rows and changes for devN entries and raw lines; True when raw lines change."""
    config = existing.config
    wanted_devn = pt.devn if pt.method in ("devN-api", "devN-pct") else ()
    to_set, stale, unchanged = devn_changes(wanted_devn, config)
    actual_devn = parse_devn(config)
    for key, value in unchanged.items():
        rows.append(Row(field=key, wanted=value, actual=value, status="unchanged"))
    for key, value in to_set.items():
        before = actual_devn.get(key, ("", ""))[1]
        status: RowStatus = "change" if before else "create"
        rows.append(Row(field=key, wanted=value, actual=before, status=status, via=pt.via))
        (api if pt.method == "devN-api" else pct)[key] = value
    for key in stale:
        value = actual_devn[key][1]
        how = "api" if inputs.can_set_devices else "ssh conf"
        rows.append(
            Row(
                field=key,
                wanted="",
                actual=value,
                status="remove",
                via=how,
                note="no longer wanted",
            )
        )
        if inputs.can_set_devices:
            delete.append(key)
        else:
            remove_lines.append(f"{key}: {value}")
    rows += _refused_rows(pt)
    wanted_raw = pt.raw_lines if pt.method == "raw" else ()
    add, remove = raw_changes(wanted_raw, existing.raw, inputs.host)
    for key, value in wanted_raw:
        if (key, value) not in add:
            rows.append(Row(field=key, wanted=value, actual=value, status="unchanged"))
    for key, value in add:
        rows.append(Row(field=key, wanted=value, status="create", via="ssh conf"))
        add_lines.append(f"{key}: {value}")
    for key, value in remove:
        rows.append(
            Row(
                field=key,
                wanted="",
                actual=value,
                status="remove",
                via="ssh conf",
                note="no longer wanted",
            )
        )
        remove_lines.append(f"{key}: {value}")
    return bool(add or remove)


def _refused_rows(pt: PassthroughPlan) -> list[Row]:
    return [
        Row(field="device", wanted=path, status="refused", note="missing on the node")
        for path in pt.refused
    ]


def _restart_reasons(
    existing: ExistingCt,
    api: Mapping[str, str],
    pct: Mapping[str, str],
    delete: Sequence[str],
    raw_changed: bool,
) -> list[str]:
    reasons = []
    if existing.pending:
        reasons.append("pending changes: " + ", ".join(sorted(existing.pending)))
    config = existing.config
    cold = sorted(
        key
        for key in [*api, *pct, *delete]
        if key not in HOTPLUG
        and not re.fullmatch(r"net\d+", key)
        and not (re.fullmatch(r"(mp|dev)\d+", key) and key not in config)
    )
    if cold:
        reasons.append("changed while running: " + ", ".join(cold))
    if raw_changed:
        reasons.append("raw lxc lines take effect at start")
    return reasons


def pve_supports_interfaces(version: str) -> bool:
    """``GET .../interfaces`` exists from pve-container 5.0.6 (PVE 8.1)."""
    return version_tuple(version) >= (8, 1)


# --------------------------------------------------------------------------- text rendering


def row_lines(rows: Sequence[Row]) -> list[str]:
    """Rows as fixed-width text lines (fixtures compare against them; the CLI draws tables)."""
    header = ("field", "wanted", "actual", "status", "via")
    table = [(row.field, row.wanted, row.actual, row.status, row.via) for row in rows]
    widths = [max(len(cells[i]) for cells in [header, *table]) for i in range(len(header))]
    lines = ["  " + "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    for row, cells in zip(rows, table, strict=True):
        text = "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
        if row.note:
            text += f"  # {row.note}"
        lines.append("  " + text)
    return lines


def plan_lines(plan: ContainerPlan) -> list[str]:
    """The plan as text: header, rows, steps, issues, host fixes, warnings."""
    vmid = str(plan.vmid) if plan.vmid is not None else "auto"
    lines = [
        f"{plan.name}: {plan.action} (vmid {vmid}, node {plan.node}, "
        f"passthrough {plan.passthrough})",
        *row_lines(plan.rows),
    ]
    lines += [f"  step: {step.describe()}" for step in plan.steps]
    lines += [f"  issue: {issue}" for issue in plan.issues]
    lines += [f"  host fix: {fix}" for fix in plan.host_fixes]
    lines += [f"  warning: {warning}" for warning in plan.warnings]
    return lines
