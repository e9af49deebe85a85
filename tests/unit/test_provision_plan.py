"""Plans from canned facts: ``tests/fixtures/provision/scenarios/*.yaml`` -> the expected text.

Each scenario's host and guest facts go through the same parsers as the live probes (the files
are what the commands print), then :func:`plan_container` / :func:`plan_guest`; the rendered plan
must equal ``<scenario>.expected.txt``. ``DFLASHOPS_REGEN_FIXTURES=1`` rewrites those files
(review the diff by hand).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from dflashops.inventory.models import Container
from dflashops.proxmox.containerplan import (
    ContainerPlan,
    CreateCt,
    EditConf,
    PctSet,
    PlanInputs,
    RebootCt,
    UpdateConfig,
    plan_lines,
)
from dflashops.proxmox.facts import (
    HOST_PROBES,
    ExistingCt,
    HostFacts,
    ProbeOutput,
    SiteFacts,
    StorageInfo,
    host_facts_from_probes,
)
from dflashops.proxmox.guest import (
    SKIPPED_LABEL,
    SKIPPED_NOTE,
    CheckGpus,
    GuestFacts,
    GuestPlan,
    InstallDriver,
    ResizeShm,
    guest_facts_from_probes,
    guest_lines,
    guest_probes,
    plan_guest,
)
from dflashops.proxmox.identity import Resource
from dflashops.proxmox.plan import plan_container
from dflashops.proxmox.rows import Row

FIXTURES = Path(__file__).parents[1] / "fixtures" / "provision"
SCENARIOS = sorted((FIXTURES / "scenarios").glob("*.yaml"))
PUBLIC_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForPlansOnly0000000000000000 ops@dfo\n"
DEFAULT_TEMPLATE = "local:vztmpl/debian-12-standard_12.7-1_amd64.tar.zst"


def read_probes(folder: Path, names: list[str]) -> dict[str, ProbeOutput]:
    rc_file = folder / "rc.yaml"
    codes: dict[str, int] = yaml.safe_load(rc_file.read_text()) if rc_file.exists() else {}
    probes = {}
    for name in names:
        path = folder / f"{name}.txt"
        text = path.read_text() if path.exists() else ""
        probes[name] = ProbeOutput(text, codes.get(name, 0 if path.exists() else 127))
    return probes


def host_facts(name: str) -> HostFacts:
    return host_facts_from_probes("pve", read_probes(FIXTURES / "hosts" / name, [*HOST_PROBES]))


def guest_facts(name: str, ct: Container) -> GuestFacts:
    return guest_facts_from_probes(read_probes(FIXTURES / "guests" / name, [*guest_probes(ct)]))


def site_facts(overrides: dict[str, Any]) -> SiteFacts:
    return SiteFacts(
        node="pve",
        api_version=str(overrides.get("api_version", "9.1.2")),
        storages=(
            StorageInfo("local", frozenset({"vztmpl", "iso", "backup"})),
            StorageInfo("local-lvm", frozenset({"rootdir", "images"})),
        ),
        templates=frozenset(overrides.get("templates", [DEFAULT_TEMPLATE])),
        appliances=frozenset(
            overrides.get(
                "appliances",
                [
                    "debian-12-standard_12.12-1_amd64.tar.zst",
                    "ubuntu-24.04-standard_24.04-2_amd64.tar.zst",
                ],
            )
        ),
    )


def container(spec: dict[str, Any]) -> Container:
    data: dict[str, Any] = {"cluster": "home", "node": "pve", **spec}
    data.setdefault("ssh", {"key_file": "/keys/id_ed25519"})
    return Container.model_validate(data)


def existing_ct(spec: dict[str, Any] | None, vmid: int) -> ExistingCt | None:
    if spec is None:
        return None
    return ExistingCt(
        vmid=vmid,
        node="pve",
        status=spec.get("status", "running"),
        lock=spec.get("lock"),
        config=spec["config"],
        pending=frozenset(spec.get("pending", [])),
        raw=tuple((k, v) for k, v in spec.get("raw", [])),
    )


def resources_of(scenario: dict[str, Any], ct: Container) -> list[Resource]:
    items = [Resource.from_api(item) for item in scenario.get("resources", [])]
    existing = scenario.get("existing")
    if existing is not None:
        config = existing["config"]
        items.append(
            Resource.from_api(
                {
                    "vmid": ct.vmid,
                    "node": "pve",
                    "name": config["hostname"],
                    "status": existing.get("status", "running"),
                    "lock": existing.get("lock"),
                    "tags": config.get("tags"),
                }
            )
        )
    return items


def run_scenario(path: Path) -> tuple[ContainerPlan, list[str]]:
    scenario = yaml.safe_load(path.read_text())
    ct = container(scenario["container"])
    host = host_facts(scenario["host"]) if "host" in scenario else None
    vmid = ct.vmid if isinstance(ct.vmid, int) else 0
    inputs = PlanInputs(
        container=ct,
        node="pve",
        can_set_devices=scenario["auth"] == "password",
        ssh_public_key=PUBLIC_KEY,
        site=site_facts(scenario.get("site", {})),
        host=host,
        resources=tuple(resources_of(scenario, ct)),
        existing=existing_ct(scenario.get("existing"), vmid),
    )
    plan = plan_container(inputs)
    lines = [f"# {scenario['description']}", *plan_lines(plan)]
    if "guest" in scenario:
        guest = plan_guest(ct, host, guest_facts(scenario["guest"], ct))
        lines += guest_lines(guest)
    return plan, lines


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_plan_matches_expected_text(path: Path) -> None:
    _plan, lines = run_scenario(path)
    text = "\n".join(lines) + "\n"
    expected = path.with_suffix(".expected.txt")
    if os.environ.get("DFLASHOPS_REGEN_FIXTURES"):
        expected.write_text(text)
    assert text == expected.read_text()


def scenario_plan(name: str) -> ContainerPlan:
    return run_scenario(FIXTURES / "scenarios" / f"{name}.yaml")[0]


def test_devn_by_api_goes_into_the_create_call() -> None:
    plan = scenario_plan("create-devn-api")
    create = next(s for s in plan.steps if isinstance(s, CreateCt))
    params = dict(create.params)
    assert params["dev0"] == "/dev/nvidia0,mode=0666"
    assert params["dev3"] == "/dev/nvidia-uvm,mode=0666"
    assert params["mp0"] == "/tank/models,mp=/models,ro=1"
    assert params["tags"] == "dflashops" and params["features"] == "nesting=1"
    assert not any(isinstance(s, PctSet | EditConf) for s in plan.steps)


def test_token_with_gpus_uses_pct_set_over_ssh() -> None:
    plan = scenario_plan("create-devn-pct-token")
    create = next(s for s in plan.steps if isinstance(s, CreateCt))
    assert not any(k.startswith(("dev", "mp")) for k, _ in create.params)
    pct = next(s for s in plan.steps if isinstance(s, PctSet))
    assert dict(pct.options)["dev1"] == "/dev/nvidia1,mode=0666"
    assert dict(pct.options)["mp0"] == "/tank/models,mp=/models,ro=1"
    assert plan.passthrough == "devN-pct"


def test_raw_lines_follow_the_cgroup_mode() -> None:
    v1 = next(s for s in scenario_plan("create-raw-cgroup1").steps if isinstance(s, EditConf))
    v2 = next(s for s in scenario_plan("create-raw-cgroup2").steps if isinstance(s, EditConf))
    assert "lxc.cgroup.devices.allow: c 195:* rwm" in v1.add
    assert "lxc.cgroup.devices.allow: c 508:* rwm" in v1.add  # nvidia-uvm's major (0x1fc)
    assert all("cgroup2" not in line for line in v1.add)
    assert "lxc.cgroup2.devices.allow: c 509:* rwm" in v2.add
    assert "lxc.mount.entry: /dev/nvidia1 dev/nvidia1 none bind,optional,create=file" in v2.add


def test_missing_uvm_is_refused_with_the_host_fix_and_no_devn_for_it() -> None:
    plan = scenario_plan("missing-uvm")
    assert plan.refused and not plan.steps
    assert any("/dev/nvidia-uvm" in issue for issue in plan.issues)
    assert any("nvidia-modprobe -u -c=0" in fix for fix in plan.host_fixes)
    assert "nvidia-modprobe" in plan.refusal() and "vmid 950" in plan.refusal()


def test_drift_is_one_put_with_the_digest_and_a_restart() -> None:
    plan = scenario_plan("existing-changes")
    put = next(s for s in plan.steps if isinstance(s, UpdateConfig))
    assert put.digest == "3f786850e387550fdab836ed7e6dc881de23001b"
    params = dict(put.params)
    assert params["cores"] == "16"
    assert params["features"] == "keyctl=1,nesting=1"
    assert "hwaddr=BC:24:11:5E:2A:01" in params["net0"] and "bridge=vmbr1" in params["net0"]
    assert "unprivileged" not in params and "rootfs" not in params  # fixed: only reported
    assert "dev0" not in put.delete  # /dev/net/tun is not ours
    reboot = next(s for s in plan.steps if isinstance(s, RebootCt))
    assert "swap" in reboot.reason and "nameserver" in reboot.reason


def test_refusals_name_the_vmid_and_what_differs() -> None:
    untagged = scenario_plan("untagged-same-name")
    assert untagged.refused and not untagged.steps
    assert "vmid 129" in untagged.refusal() and "dflashops" in untagged.refusal()
    other = scenario_plan("vmid-holds-other-name")
    assert other.refused and "'gitlab'" in other.refusal()


# --------------------------------------------------------------------------- nvidia_driver


def gpu_guest_plan(guest: str, nvidia_driver: str | None = None) -> tuple[GuestPlan, list[str]]:
    spec: dict[str, Any] = {"name": "qwen36", "gpus": [0, 1], "vmid": 950}
    if nvidia_driver is not None:
        spec["nvidia_driver"] = nvidia_driver
    ct = container(spec)
    plan = plan_guest(ct, host_facts("pve9-cgroup2-2gpu"), guest_facts(guest, ct))
    return plan, guest_lines(plan)


def driver_row(plan: GuestPlan) -> Row:
    return next(row for row in plan.rows if row.field == "nvidia driver")


def test_nvidia_driver_install_is_the_default_and_installs_the_nodes_version() -> None:
    plan, _ = gpu_guest_plan("driver-mismatch")
    install = next(s for s in plan.steps if isinstance(s, InstallDriver))
    assert (install.version, install.replaces) == ("580.95.05", "570.133")
    assert any(isinstance(s, CheckGpus) for s in plan.steps) and not plan.plan_only
    assert driver_row(plan).status == "change"


def test_nvidia_driver_skip_shows_the_gpu_steps_but_applies_none() -> None:
    plan, lines = gpu_guest_plan("fresh", "skip")
    assert [type(s) for s in plan.plan_only] == [InstallDriver, CheckGpus]
    assert [type(s) for s in plan.steps] == [ResizeShm]  # the rest of the guest plan applies
    assert driver_row(plan).note == SKIPPED_NOTE
    assert f"  {SKIPPED_LABEL}: install NVIDIA userspace driver 580.95.05" in "\n".join(lines)


def test_nvidia_driver_expect_present_checks_and_never_installs() -> None:
    missing, _ = gpu_guest_plan("fresh", "expect-present")
    assert not any(isinstance(s, InstallDriver) for s in [*missing.steps, *missing.plan_only])
    check = next(s for s in missing.steps if isinstance(s, CheckGpus))
    assert "install NVIDIA userspace driver 580.95.05" in check.hint
    row = driver_row(missing)
    assert row.status == "absent" and "expect-present" in row.note
    assert driver_row(gpu_guest_plan("driver-mismatch", "expect-present")[0]).status == "differs"
    present, _ = gpu_guest_plan("ready", "expect-present")
    assert not any(isinstance(s, InstallDriver | CheckGpus) for s in present.steps)
    assert driver_row(present).status == "unchanged"
