"""The plan for a container PVE already has: wanted vs actual, option by option.

Only what differs changes (through the API with the config digest, ``pct set`` or the config
file over SSH). Options fixed at create time are shown, never changed. A running container is
restarted only when a change does not take effect while it runs (PVE's hotplug rules).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dflashops.inventory.models import MANAGED_TAG, Container
from dflashops.proxmox.containerplan import (
    ContainerPlan,
    EditConf,
    PctSet,
    PlanInputs,
    RebootCt,
    StartCt,
    Step,
    UpdateConfig,
)
from dflashops.proxmox.facts import ExistingCt
from dflashops.proxmox.identity import split_tags
from dflashops.proxmox.passthrough import (
    PassthroughPlan,
    devn_changes,
    parse_devn,
    raw_changes,
    refused_device_rows,
)
from dflashops.proxmox.pveconfig import (
    HOTPLUG,
    as_text,
    mount_value,
    parse_props,
    render_props,
    size_gib,
    wanted_basics,
)
from dflashops.proxmox.rows import Row, RowStatus


def plan_change(
    inputs: PlanInputs, existing: ExistingCt, plan: ContainerPlan, pt: PassthroughPlan
) -> None:
    """Fill ``plan`` with a row per managed option and the steps that bring PVE to the inventory."""
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
        actual = as_text(config.get(key))
        compare(key, basics[key], actual, basics[key] == actual)
    _compare_net(basics["net0"], config, compare)
    if "nameserver" in basics:
        actual = as_text(config.get("nameserver"))
        compare("nameserver", basics["nameserver"], actual, basics["nameserver"] == actual)
    _compare_features(config, rows, api)
    tags = split_tags(as_text(config.get("tags")))
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
    reasons = _restart_reasons(existing, api, pct, delete, raw_changed)
    plan.steps += _state_steps(existing, reasons, rows)


def _compare_features(config: Mapping[str, Any], rows: list[Row], api: dict[str, str]) -> None:
    """``nesting=1`` is added; features the operator set otherwise are kept."""
    features = parse_props(as_text(config.get("features")))
    shown = render_props(features)
    if features.get("nesting") == "1":
        rows.append(Row(field="features", wanted="nesting=1", actual=shown, status="unchanged"))
        return
    rows.append(Row(field="features", wanted="nesting=1", actual=shown, status="change", via="api"))
    api["features"] = render_props({**features, "nesting": "1"})


def _state_steps(existing: ExistingCt, reasons: list[str], rows: list[Row]) -> list[Step]:
    """Start a stopped container; restart a running one when a change waits for its start."""
    if not existing.running:
        rows.append(Row(field="state", wanted="running", actual=existing.status, status="change"))
        return [StartCt()]
    if not reasons:
        rows.append(Row(field="state", wanted="running", actual="running", status="unchanged"))
        return []
    why = "; ".join(reasons)
    rows.append(
        Row(
            field="state",
            wanted="running",
            actual="running",
            status="change",
            note=f"restart: {why}",
        )
    )
    return [RebootCt(why)]


def _compare_net(
    wanted: str, config: Mapping[str, Any], compare: Callable[[str, str, str, bool], None]
) -> None:
    actual_text = as_text(config.get("net0"))
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
    unpriv = "1" if as_text(config.get("unprivileged")) == "1" else "0"
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
    rootfs = parse_props(as_text(config.get("rootfs")), "volume")
    storage = rootfs.get("volume", "").partition(":")[0]
    size = size_gib(rootfs.get("size", "")) or 0.0
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
        key: parse_props(as_text(value), "volume")
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
        rows.append(_removal_row(key, value, how))
        if inputs.can_set_devices:
            delete.append(key)
        else:
            remove_lines.append(f"{key}: {value}")
    rows += refused_device_rows(pt)
    wanted_raw = pt.raw_lines if pt.method == "raw" else ()
    add, remove = raw_changes(wanted_raw, existing.raw, inputs.host)
    for key, value in wanted_raw:
        if (key, value) not in add:
            rows.append(Row(field=key, wanted=value, actual=value, status="unchanged"))
    for key, value in add:
        rows.append(Row(field=key, wanted=value, status="create", via="ssh conf"))
        add_lines.append(f"{key}: {value}")
    for key, value in remove:
        rows.append(_removal_row(key, value, "ssh conf"))
        remove_lines.append(f"{key}: {value}")
    return bool(add or remove)


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


def _removal_row(key: str, value: str, via: str) -> Row:
    """A device or raw line dflashops set once and the inventory no longer asks for."""
    return Row(
        field=key, wanted="", actual=value, status="remove", via=via, note="no longer wanted"
    )
