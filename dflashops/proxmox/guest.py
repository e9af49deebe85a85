"""Inside a running container, over SSH: facts -> plan -> apply, one step per concern.

- the NVIDIA userspace driver, exactly the node's version (the ``.run`` installer with
  ``--no-kernel-module``: the kernel module is the host's); skipped without GPUs;
- ``nvidia-smi`` sees every GPU passed through (checked after the driver step);
- ``/dev/shm`` large enough for NCCL (``shm_gb``): remounted and made persistent in /etc/fstab;
- model directories reachable (bind mount present) and free disk space (reported only).

The container's ``nvidia_driver`` setting decides the two GPU steps: ``install`` (the default)
installs a missing or different driver and checks it; ``expect-present`` only checks, so a
container without the node's driver fails the check instead of getting one; ``skip`` plans both
steps but applies neither (:attr:`GuestPlan.plan_only`), for nodes whose GPU device nodes have
no driver behind them and nothing to download from.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dflashops.errors import RemoteError
from dflashops.inventory.models import Container
from dflashops.proxmox.facts import (
    HostFacts,
    ProbeOutput,
    probe_script,
    split_probe_output,
)
from dflashops.proxmox.passthrough import gpu_indices
from dflashops.proxmox.rows import Row, row_lines
from dflashops.remote import SshConnection, get_text, put_atomic

GIB = 1 << 30
DRIVER_URL = "https://us.download.nvidia.com/XFree86/Linux-x86_64/{v}/NVIDIA-Linux-x86_64-{v}.run"
DRIVER_DEADLINE_S = 1800.0
_FSTAB_SHM = re.compile(r"^\s*[^#\s]+\s+/dev/shm\s")
SKIPPED_NOTE = "not applied: nvidia_driver is skip"
SKIPPED_LABEL = "not applied (nvidia_driver: skip)"
PASSTHROUGH_HINT = "check the passthrough entries and that the host's /dev/nvidia* exist"


class GuestError(RemoteError):
    """A step inside the container failed or its check did not pass."""


@dataclass(frozen=True)
class GuestFacts:
    driver_version: str | None
    visible_gpus: int | None  # None: nvidia-smi did not answer
    nvidia_error: str | None
    shm_bytes: int | None
    fstab_shm: str | None
    mounts: Mapping[str, bool] = field(default_factory=dict)  # path -> is a directory
    root_avail_bytes: int | None = None


def guest_probes(ct: Container) -> dict[str, str]:
    paths = " ".join(shlex.quote(str(m.path)) for m in ct.mounts)
    probes = {
        "nvidia-smi": "nvidia-smi --query-gpu=index,driver_version --format=csv,noheader",
        "shm": "df -B1 /dev/shm",
        "fstab": "cat /etc/fstab",
        "disk": "df -B1 /",
    }
    if paths:
        probes["mounts"] = (
            f'for p in {paths}; do if [ -d "$p" ]; then echo "dir $p"; '
            'else echo "missing $p"; fi; done'
        )
    return probes


def _df_size(text: str, column: int) -> int | None:
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or len(lines[-1]) <= column or not lines[-1][column].isdigit():
        return None
    return int(lines[-1][column])


def guest_facts_from_probes(probes: Mapping[str, ProbeOutput]) -> GuestFacts:
    smi = probes.get("nvidia-smi", ProbeOutput("", 127))
    rows = [
        [cell.strip() for cell in line.split(",")]
        for line in smi.text.splitlines()
        if re.match(r"\s*\d+\s*,", line)
    ]
    driver = rows[0][1] if smi.ok and rows and len(rows[0]) > 1 else None
    error = None
    if not smi.ok:
        lines = smi.text.strip().splitlines()
        error = "nvidia-smi not found" if smi.rc == 127 else (lines[0] if lines else "failed")
        # a userspace driver that does not match the kernel module says which one it is
        library = re.search(r"NVML library version:\s*([\d.]+)", smi.text)
        driver = library.group(1) if library else None
    shm = probes.get("shm", ProbeOutput("", 1))
    fstab = probes.get("fstab", ProbeOutput("", 1))
    fstab_line = next((line for line in fstab.text.splitlines() if _FSTAB_SHM.match(line)), None)
    mounts = {}
    for line in probes.get("mounts", ProbeOutput("", 0)).text.splitlines():
        state, _, path = line.partition(" ")
        if state in ("dir", "missing"):
            mounts[path] = state == "dir"
    disk = probes.get("disk", ProbeOutput("", 1))
    return GuestFacts(
        driver_version=driver,
        visible_gpus=len(rows) if smi.ok else None,
        nvidia_error=error,
        shm_bytes=_df_size(shm.text, 1) if shm.ok else None,
        fstab_shm=fstab_line,
        mounts=mounts,
        root_avail_bytes=_df_size(disk.text, 3) if disk.ok else None,
    )


def probe_guest(conn: SshConnection, ct: Container, *, deadline: float = 60.0) -> GuestFacts:
    result = conn.run(
        probe_script(guest_probes(ct)), deadline=deadline, display="container facts probe"
    )
    return guest_facts_from_probes(split_probe_output(result.stdout))


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class InstallDriver:
    version: str
    replaces: str | None

    def describe(self) -> str:
        what = f"replace {self.replaces} with" if self.replaces else "install"
        return f"{what} NVIDIA userspace driver {self.version} (.run --no-kernel-module)"


@dataclass(frozen=True)
class CheckGpus:
    expected: int
    driver_version: str
    hint: str = PASSTHROUGH_HINT  # what to do when the check fails

    def describe(self) -> str:
        return f"check nvidia-smi sees {self.expected} GPU(s) with driver {self.driver_version}"


@dataclass(frozen=True)
class ResizeShm:
    size_gb: int
    fstab_line: str

    def describe(self) -> str:
        return f"remount /dev/shm with size={self.size_gb}G and persist it in /etc/fstab"


GuestStep = InstallDriver | CheckGpus | ResizeShm


@dataclass
class GuestPlan:
    rows: list[Row] = field(default_factory=list)
    steps: list[GuestStep] = field(default_factory=list)
    plan_only: list[GuestStep] = field(default_factory=list)  # shown, not applied (skip)
    warnings: list[str] = field(default_factory=list)


def shm_fstab_line(size_gb: int) -> str:
    return f"tmpfs /dev/shm tmpfs rw,nosuid,nodev,size={size_gb}G 0 0"


def plan_guest(ct: Container, host: HostFacts | None, facts: GuestFacts) -> GuestPlan:
    plan = GuestPlan()
    if ct.gpus:
        _plan_gpus(ct, host, facts, plan)
    else:
        plan.rows.append(
            Row(field="nvidia driver", wanted="-", status="unchanged", note="no GPUs: skipped")
        )
    _plan_shm(ct, facts, plan)
    _plan_models(ct, facts, plan)
    return plan


def _plan_gpus(ct: Container, host: HostFacts | None, facts: GuestFacts, plan: GuestPlan) -> None:
    wanted = host.driver_version if host is not None else None
    if wanted is None:
        plan.warnings.append("the node's driver version is unknown: driver step skipped")
        return
    skip = ct.nvidia_driver == "skip"
    target = plan.plan_only if skip else plan.steps
    note = SKIPPED_NOTE if skip else ""
    hint = PASSTHROUGH_HINT
    if facts.driver_version == wanted:
        plan.rows.append(
            Row(field="nvidia driver", wanted=wanted, actual=wanted, status="unchanged")
        )
    elif ct.nvidia_driver == "expect-present":
        plan.rows.append(_expected_driver_row(wanted, facts))
        hint = (
            f"install NVIDIA userspace driver {wanted} in the container "
            "(or set nvidia_driver: install)"
        )
    else:
        plan.rows.append(_driver_row(wanted, facts, note))
        target.append(InstallDriver(wanted, facts.driver_version))
    expected = len(gpu_indices(ct, host)) if host is not None else 0
    seen = "?" if facts.visible_gpus is None else str(facts.visible_gpus)
    ok = facts.visible_gpus == expected and facts.driver_version == wanted
    plan.rows.append(
        Row(
            field="visible GPUs",
            wanted=str(expected),
            actual=seen,
            status="unchanged" if ok else "change",
            via="" if ok else "check",
            note="" if ok else (note or "checked after the driver step"),
        )
    )
    if not ok:
        target.append(CheckGpus(expected, wanted, hint))


def _driver_row(wanted: str, facts: GuestFacts, note: str) -> Row:
    """The driver row when dflashops installs it (or would, but ``skip`` says not to)."""
    if not note:
        note = "userspace only: --no-kernel-module"
        if facts.driver_version and facts.nvidia_error:
            note = f"nvidia-smi: {facts.nvidia_error}"
    return Row(
        field="nvidia driver",
        wanted=wanted,
        actual=facts.driver_version or (facts.nvidia_error or "absent"),
        status="change" if facts.driver_version else "create",
        via="ssh",
        note=note,
    )


def _expected_driver_row(wanted: str, facts: GuestFacts) -> Row:
    """The driver row under ``expect-present`` when the container lacks the node's version."""
    return Row(
        field="nvidia driver",
        wanted=wanted,
        actual=facts.driver_version or (facts.nvidia_error or "absent"),
        status="differs" if facts.driver_version else "absent",
        note="nvidia_driver is expect-present: not installed, so the GPU check fails",
    )


def _plan_shm(ct: Container, facts: GuestFacts, plan: GuestPlan) -> None:
    wanted = ct.shm_gb * GIB
    shown = f"{ct.shm_gb}G"
    if facts.shm_bytes is None:
        plan.rows.append(
            Row(field="/dev/shm", wanted=shown, actual="unknown", status="change", via="ssh")
        )
        plan.steps.append(ResizeShm(ct.shm_gb, shm_fstab_line(ct.shm_gb)))
        return
    actual = f"{facts.shm_bytes / GIB:.1f}G"
    # tmpfs rounds to pages; never shrink a larger /dev/shm
    if facts.shm_bytes >= wanted * 0.99:
        plan.rows.append(
            Row(field="/dev/shm", wanted=f">= {shown}", actual=actual, status="unchanged")
        )
        return
    plan.rows.append(
        Row(
            field="/dev/shm",
            wanted=f">= {shown}",
            actual=actual,
            status="change",
            via="ssh",
            note="remount + /etc/fstab",
        )
    )
    plan.steps.append(ResizeShm(ct.shm_gb, shm_fstab_line(ct.shm_gb)))


def _plan_models(ct: Container, facts: GuestFacts, plan: GuestPlan) -> None:
    for mount in ct.mounts:
        path = str(mount.path)
        present = facts.mounts.get(path)
        if present:
            plan.rows.append(
                Row(
                    field=f"models {path}",
                    wanted="reachable",
                    actual="directory",
                    status="unchanged",
                )
            )
        else:
            plan.rows.append(
                Row(
                    field=f"models {path}",
                    wanted="reachable",
                    actual="missing",
                    status="absent",
                    note="bind mount not active: restart the CT",
                )
            )
            plan.warnings.append(f"{path} is not visible in the container")
    if facts.root_avail_bytes is not None:
        plan.rows.append(
            Row(
                field="disk free /",
                wanted="-",
                actual=f"{facts.root_avail_bytes / GIB:.1f}G",
                status="unchanged",
                note="room for model downloads (report only)",
            )
        )


def guest_lines(plan: GuestPlan) -> list[str]:
    """The guest plan as text (see :func:`dflashops.proxmox.containerplan.plan_lines`)."""
    lines = ["inside the container:", *row_lines(plan.rows)]
    lines += [f"  step: {step.describe()}" for step in plan.steps]
    lines += [f"  {SKIPPED_LABEL}: {step.describe()}" for step in plan.plan_only]
    lines += [f"  warning: {warning}" for warning in plan.warnings]
    return lines


# --------------------------------------------------------------------------- apply


def apply_guest(
    conn: SshConnection, ct: Container, plan: GuestPlan, progress: Callable[[str], None]
) -> list[str]:
    """Run the plan's steps in order; returns what was done."""
    done = []
    for step in plan.steps:
        progress(step.describe())
        if isinstance(step, InstallDriver):
            _install_driver(conn, step.version)
        elif isinstance(step, CheckGpus):
            _check_gpus(conn, step)
        else:
            _resize_shm(conn, step)
        done.append(step.describe())
    return done


def _install_driver(conn: SshConnection, version: str) -> None:
    url = DRIVER_URL.format(v=version)
    run = f"/tmp/NVIDIA-Linux-x86_64-{version}.run"
    script = (
        "set -e\n"
        f"url={shlex.quote(url)}; f={shlex.quote(run)}\n"
        'if command -v curl >/dev/null; then curl -fsSL -o "$f" "$url"; '
        'else wget -q -O "$f" "$url"; fi\n'
        'sh "$f" --silent --no-questions --ui=none --no-kernel-module --no-nouveau-check\n'
        'rm -f "$f"\n'
    )
    conn.run(script, deadline=DRIVER_DEADLINE_S, display=f"install NVIDIA driver {version}")


def _check_gpus(conn: SshConnection, step: CheckGpus) -> None:
    out = conn.run(
        "nvidia-smi --query-gpu=index,driver_version --format=csv,noheader", ok_codes=None
    )
    rows = [line for line in out.stdout.splitlines() if re.match(r"\s*\d+\s*,", line)]
    versions = {line.split(",")[1].strip() for line in rows}
    if out.exit_code != 0 or len(rows) != step.expected or versions != {step.driver_version}:
        raise GuestError(
            f"nvidia-smi sees {len(rows)} GPU(s) with driver {sorted(versions) or '-'}, "
            f"expected {step.expected} with {step.driver_version}"
            + (f" ({(out.stderr or out.stdout).strip()[:200]})" if out.exit_code else ""),
            host=conn.name,
            hint=step.hint,
        )


def _resize_shm(conn: SshConnection, step: ResizeShm) -> None:
    conn.run(f"mount -o remount,size={step.size_gb}G /dev/shm")
    fstab = get_text(conn, "/etc/fstab") if _exists(conn, "/etc/fstab") else ""
    kept = [line for line in fstab.splitlines() if not _FSTAB_SHM.match(line)]
    put_atomic(conn, ("\n".join([*kept, step.fstab_line]) + "\n").encode(), "/etc/fstab")


def _exists(conn: SshConnection, path: str) -> bool:
    return conn.run(f"test -e {shlex.quote(path)}", ok_codes=(0, 1)).exit_code == 0
