"""The plan for a container PVE does not have yet: every wanted option at create time.

Options the API may not set with the credentials at hand (bind mounts, ``devN`` with a token) go
through ``pct set`` over SSH after the create; raw lxc lines are appended to the config file.
"""

from __future__ import annotations

from dflashops.inventory.models import Container
from dflashops.proxmox.containerplan import (
    ContainerPlan,
    CreateCt,
    DownloadTemplate,
    EditConf,
    PctSet,
    PlanInputs,
    StartCt,
)
from dflashops.proxmox.facts import SiteFacts
from dflashops.proxmox.passthrough import PassthroughPlan, refused_device_rows
from dflashops.proxmox.pveconfig import mount_value, wanted_basics
from dflashops.proxmox.rows import Row


def plan_create(inputs: PlanInputs, plan: ContainerPlan, pt: PassthroughPlan) -> None:
    """Fill ``plan`` with the rows and steps that create, configure and start the container."""
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
    rows += refused_device_rows(pt)
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
