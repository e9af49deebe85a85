"""``provision``: facts -> plan -> apply for each container, until PVE matches the inventory.

Apply runs in rounds. Each round gathers fresh facts (waiting while the container is locked),
plans, and runs the plan's steps; the next round must find nothing left to do. A step that loses
a race (the digest changed, the vmid was just taken, the container started meanwhile) ends the
round early and the next round plans again from what is there now. So two provisions of one
container, or a provision racing an operator, converge on one correctly configured container.

Once PVE is right the container is started, its address learned (``GET .../interfaces`` on
PVE >= 8.1, else the inventory's static address) and a real SSH login made with the container's
SSH settings (host keys verified). Then the steps inside the container run
(:mod:`dflashops.proxmox.guest`).

Engine venv hook: ``launch`` installs ``/opt/dflashops/venv-<engine>-<version>`` plus the server
wheel; it belongs after :func:`_guest_phase` in :meth:`Provisioner.apply` (it needs a reachable,
GPU-ready container) and is not called from here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import shlex
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dflashops.errors import DflashopsError, ProxmoxError, RemoteError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.proxmox.client import (
    PveClient,
    is_already_exists,
    is_digest_conflict,
    is_locked,
)
from dflashops.proxmox.facts import (
    ExistingCt,
    HostFacts,
    Resource,
    SiteFacts,
    list_resources,
    probe_host,
    probe_site,
    read_existing,
)
from dflashops.proxmox.guest import GuestPlan, apply_guest, plan_guest, probe_guest
from dflashops.proxmox.passthrough import edit_conf_text
from dflashops.proxmox.plan import (
    ContainerPlan,
    CreateCt,
    DownloadTemplate,
    EditConf,
    PctSet,
    PlanInputs,
    RebootCt,
    StartCt,
    Step,
    UpdateConfig,
    locate,
    plan_container,
    pve_supports_interfaces,
)
from dflashops.proxmox.report import ContainerReport, ProvisionReport
from dflashops.remote import RemoteConnectError, SshConnection, get_bytes
from dflashops.remote.errors import HostKeyError

log = logging.getLogger("dflashops.proxmox")

Progress = Callable[[str], None]
Confirm = Callable[[ProvisionReport], bool]


class ProvisionError(DflashopsError):
    """A container could not be provisioned (refused, or a step failed)."""


class _Replan(Exception):
    """A step lost a race; gather facts again and plan from what is there now."""


@dataclass(frozen=True)
class ProvisionOptions:
    lock_wait_s: float = 300.0  # how long a locked container is waited for
    task_timeout_s: float = 600.0
    address_timeout_s: float = 120.0
    ssh_timeout_s: float = 120.0
    max_rounds: int = 6
    vmid_floor: int | None = None  # vmid: auto picks the lowest free vmid >= this one
    guest: bool = True  # run the steps inside the container


@dataclass
class _Target:
    """Where a container is while its plan is applied."""

    vmid: int | None
    node: str


def provision(
    inventory: Inventory,
    names: Iterable[str] = (),
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
    confirm: Confirm | None = None,
    options: ProvisionOptions | None = None,
) -> ProvisionReport:
    """Plan every named container (all when none is named) and, unless ``dry_run``, apply.

    ``confirm`` sees the plans before anything changes and may say no (then nothing changes).
    Failures and refusals do not stop the other containers; they are in the report
    (:attr:`ProvisionReport.ok`, :attr:`ProvisionReport.failures`).
    """
    with Provisioner(inventory, progress=progress, options=options) as prov:
        containers = inventory.select(names)
        report = ProvisionReport(dry_run=dry_run)
        for ct in containers:
            entry = prov.new_report(ct)
            report.containers.append(entry)
            try:
                plan = prov.plan(ct, wait_locks=False)
                prov.record_plan(entry, plan)
                if dry_run and plan.action in ("change", "unchanged"):
                    prov.preview_guest(ct, plan, entry)
                elif not plan.refused:
                    entry.guest_steps = ["planned once the container is reachable over SSH"]
            except DflashopsError as exc:
                entry.error = exc.one_line()
        if dry_run:
            return report
        wanted = [c for c in report.containers if c.ok]
        if confirm is not None and any(c.has_changes for c in wanted) and not confirm(report):
            raise ProvisionError("nothing changed: not confirmed")
        for ct in containers:
            entry = report.container(ct.name)
            if entry.error is not None:
                continue
            # a refusal is final only once locks are waited out (a concurrent create holds one)
            try:
                prov.apply(ct, entry)
            except DflashopsError as exc:
                text = exc.one_line()
                entry.error = text if text.startswith(f"{ct.name}") else f"{ct.name}: {text}"
        return report


class Provisioner:
    """One provision run: API clients and node connections shared by its containers."""

    def __init__(
        self,
        inventory: Inventory,
        *,
        progress: Progress | None = None,
        options: ProvisionOptions | None = None,
    ) -> None:
        self.inventory = inventory
        self.say: Progress = progress or (lambda _m: None)
        self.options = options or ProvisionOptions()
        self._clients: dict[str, PveClient] = {}
        self._nodes: dict[tuple[str, str], SshConnection] = {}
        self._host: dict[tuple[str, str], HostFacts] = {}
        self._site: dict[tuple[str, str], SiteFacts] = {}

    def __enter__(self) -> Provisioner:
        return self

    def __exit__(self, *exc: object) -> None:
        for conn in self._nodes.values():
            conn.close()

    # ------------------------------------------------------------------ shared resources

    def client(self, ct: Container) -> PveClient:
        if ct.cluster not in self._clients:
            self._clients[ct.cluster] = PveClient.for_cluster(self.inventory, ct.cluster)
        return self._clients[ct.cluster]

    def node_conn(self, ct: Container, node: str | None = None) -> SshConnection:
        """SSH to the PVE node holding the container (``pct``, config files, host facts)."""
        name = node or self.inventory.pve_node_name(ct)
        key = (ct.cluster, name)
        if key not in self._nodes:
            inv_node = self._inventory_node(ct, name)
            access = self.inventory.clusters[ct.cluster].nodes[inv_node].ssh
            if not access.host:
                raise ProvisionError(
                    f"node {inv_node} has no ssh.host; dflashops needs SSH to it for this plan"
                )
            self._nodes[key] = SshConnection.from_access(access, deadline=120.0, name=name)
        return self._nodes[key]

    def _inventory_node(self, ct: Container, pve_name: str) -> str:
        cluster = self.inventory.clusters[ct.cluster]
        for key, node in cluster.nodes.items():
            if (node.pve_name or key) == pve_name:
                return key
        raise ProvisionError(f"node {pve_name} is not in cluster {ct.cluster} of the inventory")

    def host_facts(self, ct: Container, node: str) -> HostFacts:
        key = (ct.cluster, node)
        if key not in self._host:
            self.say(f"{ct.name}: probing node {node} (pveversion, cgroup, nvidia-smi, /dev)")
            self._host[key] = probe_host(self.node_conn(ct, node), node)
        return self._host[key]

    def site_facts(self, ct: Container, node: str, *, fresh: bool = False) -> SiteFacts:
        key = (ct.cluster, node)
        if fresh or key not in self._site:
            storages = {c.template.partition(":")[0] for c in self.inventory.containers.values()}
            self._site[key] = probe_site(self.client(ct), node, storages)
        return self._site[key]

    # ------------------------------------------------------------------ plan

    def plan(self, ct: Container, *, wait_locks: bool) -> ContainerPlan:
        """Facts -> plan. With ``wait_locks``, a locked container is waited for first."""
        inputs = self.gather(ct, wait_locks=wait_locks)
        return plan_container(inputs)

    def gather(self, ct: Container, *, wait_locks: bool) -> PlanInputs:
        client = self.client(ct)
        resources = self._resources(ct, wait_locks=wait_locks)
        found, issues = locate(ct, resources)
        node = found.node if found is not None else self.inventory.pve_node_name(ct)
        existing: ExistingCt | None = None
        if found is not None and not issues:
            existing = read_existing(client, found.node, found.vmid)
        host = self.host_facts(ct, node) if ct.gpus and not issues else None
        return PlanInputs(
            container=ct,
            node=self.inventory.pve_node_name(ct),
            can_set_devices=client.can_set_devices,
            ssh_public_key=_public_key(ct),
            site=self.site_facts(ct, node),
            host=host,
            resources=tuple(resources),
            existing=existing,
        )

    def _resources(self, ct: Container, *, wait_locks: bool) -> list[Resource]:
        """The cluster's containers; with ``wait_locks``, once none of ours is locked."""
        client = self.client(ct)
        end = time.monotonic() + self.options.lock_wait_s
        announced = False
        while True:
            resources = list_resources(client)
            locked = [r for r in resources if r.lock and _concerns(ct, r)]
            if not wait_locks or not locked:
                return resources
            if time.monotonic() > end:
                r = locked[0]
                raise ProvisionError(
                    f"vmid {r.vmid} is still locked ({r.lock}) after "
                    f"{self.options.lock_wait_s:.0f}s",
                    hint="another operation holds the lock; if none runs, an operator may "
                    f"clear it with `pct unlock {r.vmid}`",
                )
            if not announced:
                r = locked[0]
                self.say(f"{ct.name}: vmid {r.vmid} is locked ({r.lock}); waiting")
                announced = True
            time.sleep(0.5)

    def new_report(self, ct: Container) -> ContainerReport:
        return ContainerReport(
            name=ct.name,
            cluster=ct.cluster,
            node=self.inventory.pve_node_name(ct),
            vmid=ct.vmid if isinstance(ct.vmid, int) else None,
        )

    def record_plan(self, entry: ContainerReport, plan: ContainerPlan) -> None:
        entry.vmid = plan.vmid
        entry.node = plan.node
        entry.action = plan.action
        entry.passthrough = plan.passthrough
        entry.rows = list(plan.rows)
        entry.steps = [step.describe() for step in plan.steps]
        entry.issues = list(plan.issues)
        entry.host_fixes = list(plan.host_fixes)
        entry.warnings = list(plan.warnings)

    def preview_guest(self, ct: Container, plan: ContainerPlan, entry: ContainerReport) -> None:
        """Dry run on an existing container: the guest plan, if it answers SSH right now."""
        if plan.vmid is None:
            return
        client = self.client(ct)
        status = client.ct_status(plan.node, plan.vmid).get("status")
        if status != "running":
            entry.guest_steps = ["planned once the container runs"]
            return
        try:
            address = self._address(ct, plan.node, plan.vmid, timeout_s=5.0)
            with self._ssh(ct, address, deadline=15.0, attempts=1) as conn:
                guest = self._guest_plan(ct, plan.node, conn)
        except DflashopsError as exc:
            entry.guest_steps = [f"unknown: {exc.one_line()}"]
            return
        _record_guest(entry, guest)

    # ------------------------------------------------------------------ apply

    def apply(self, ct: Container, entry: ContainerReport) -> None:
        """Rounds of facts -> plan -> steps until nothing is left; then SSH and guest steps."""
        target = _Target(entry.vmid, entry.node)
        for round_no in range(self.options.max_rounds):
            plan = self.plan(ct, wait_locks=True)
            if round_no == 0:
                self.record_plan(entry, plan)  # what apply found, locks waited out
            if plan.refused:
                raise ProvisionError(plan.refusal())
            if not plan.steps:
                target = _Target(plan.vmid, plan.node)
                break
            target = _Target(plan.vmid, plan.node)
            try:
                for step in plan.steps:
                    self.say(f"{ct.name}: {step.describe()}")
                    self._run_step(ct, step, target)
                    entry.applied.append(step.describe())
            except _Replan as why:
                self.say(f"{ct.name}: {why}; planning again")
                entry.applied.append(f"replanned: {why}")
        else:
            raise ProvisionError(
                f"still changing after {self.options.max_rounds} rounds: "
                + "; ".join(step.describe() for step in plan.steps)
            )
        entry.vmid, entry.node = target.vmid, target.node
        if target.vmid is None:
            raise ProvisionError("no vmid after apply (internal error)")
        address = self._address(ct, target.node, target.vmid, self.options.address_timeout_s)
        entry.address = address
        if not self.options.guest:
            return
        with self._wait_ssh(ct, address) as conn:
            self._guest_phase(ct, target.node, conn, entry)
        # launch's engine venv step (dflashops.engine) plugs in here, after the guest steps

    def _guest_plan(self, ct: Container, node: str, conn: SshConnection) -> GuestPlan:
        facts = probe_guest(conn, ct)
        host = self.host_facts(ct, node) if ct.gpus else None
        lab = self.site_facts(ct, node).is_lab
        return plan_guest(ct, host, facts, lab=lab)

    def _guest_phase(
        self, ct: Container, node: str, conn: SshConnection, entry: ContainerReport
    ) -> None:
        guest = self._guest_plan(ct, node, conn)
        _record_guest(entry, guest)
        entry.applied += apply_guest(conn, ct, guest, self.say)

    # ------------------------------------------------------------------ steps

    def _run_step(self, ct: Container, step: Step, target: _Target) -> None:
        client = self.client(ct)
        if isinstance(step, DownloadTemplate):
            client.download_template(target.node, step.storage, step.template, progress=self.say)
            self.site_facts(ct, target.node, fresh=True)
        elif isinstance(step, CreateCt):
            target.vmid = self._create(ct, step, target.node)
        elif isinstance(step, UpdateConfig):
            vmid = _vmid(target)
            try:
                client.ct_update(
                    target.node,
                    vmid,
                    dict(step.params),
                    delete=list(step.delete),
                    digest=step.digest,
                    lock_wait_s=self.options.lock_wait_s,
                    progress=self.say,
                )
            except ProxmoxError as exc:
                if is_digest_conflict(exc):
                    raise _Replan(f"CT {vmid} config changed meanwhile") from None
                raise
        elif isinstance(step, PctSet):
            self._pct_set(ct, target, step)
        elif isinstance(step, EditConf):
            self._edit_conf(ct, target, step)
        elif isinstance(step, StartCt):
            self._power(ct, target, "start")
        elif isinstance(step, RebootCt):
            self._power(ct, target, "reboot")

    def _create(self, ct: Container, step: CreateCt, node: str) -> int:
        client = self.client(ct)
        params = dict(step.params)
        attempts = 1 if step.vmid is not None else 10
        for _ in range(attempts):
            vmid = step.vmid if step.vmid is not None else self._allocate_vmid(client)
            try:
                upid = str(client.post(f"nodes/{node}/lxc", vmid=vmid, **params))
            except ProxmoxError as exc:
                if not is_already_exists(exc):
                    raise
                if step.vmid is not None:
                    raise _Replan(f"vmid {vmid} was just taken") from None
                self.say(f"{ct.name}: vmid {vmid} was just taken; trying the next one")
                continue
            self.say(f"{ct.name}: creating CT {vmid}")
            client.wait_task(upid, timeout_s=self.options.task_timeout_s, progress=self.say)
            return vmid if step.vmid is not None else self._ensure_single(ct, vmid, node)
        raise ProvisionError(f"no free vmid after {attempts} attempts (others create too?)")

    def _allocate_vmid(self, client: PveClient) -> int:
        floor = self.options.vmid_floor
        if floor is None:
            return client.next_vmid()
        taken = {int(item["vmid"]) for item in client.get("cluster/resources", type="vm") or []}
        candidate = floor
        while candidate in taken:
            candidate += 1
        try:
            return client.next_vmid(candidate)
        except ProxmoxError as exc:
            if is_already_exists(exc):
                return client.next_vmid(candidate + 1)
            raise

    def _ensure_single(self, ct: Container, mine: int, node: str) -> int:
        """After an auto-vmid create: if a concurrent provision made one too, the lowest vmid
        stays and the others' creators remove their own (never someone else's)."""
        client = self.client(ct)
        end = time.monotonic() + self.options.lock_wait_s
        while True:
            resources = list_resources(client)
            # a create in progress may not have its hostname yet: PVE shows it as CT<vmid>
            creating = [
                r
                for r in resources
                if r.lock == "create" and r.vmid != mine and r.name in (ct.name, f"CT{r.vmid}")
            ]
            if not creating or time.monotonic() > end:
                break
            time.sleep(0.3)
        same = sorted(r.vmid for r in resources if r.name == ct.name and r.managed)
        if len(same) <= 1 or same[0] == mine:
            return mine
        winner = same[0]
        self.say(f"{ct.name}: vmid {winner} was created concurrently; removing my CT {mine}")
        client.run_task(
            f"destroy duplicate CT {mine}",
            lambda: str(client.delete(f"nodes/{node}/lxc/{mine}", purge=1)),
            lock_wait_s=self.options.lock_wait_s,
        )
        return winner

    def _pct_set(self, ct: Container, target: _Target, step: PctSet) -> None:
        """``pct set`` on the node, only while the config is still the one the API showed."""
        vmid = _vmid(target)
        args = " ".join(f"-{key} {shlex.quote(value)}" for key, value in step.options)
        conn = self.node_conn(ct, target.node)
        q = shlex.quote(f"/etc/pve/nodes/{target.node}/lxc/{vmid}.conf")

        def attempt() -> None:
            digest = self.client(ct).ct_config(target.node, vmid).get("digest", "")
            script = (
                f'[ "$(sha1sum < {q} | cut -c1-40)" = {shlex.quote(str(digest))} ] || '
                '{ echo "detected modified configuration" >&2; exit 3; }; '
                f"pct set {vmid} {args}"
            )
            result = conn.run(script, ok_codes=(0, 3), deadline=120.0, display=f"pct set {vmid}")
            if result.exit_code == 3:
                raise _Replan(f"CT {vmid} config changed meanwhile")

        _retry_remote_locked(attempt, self.options.lock_wait_s)

    def _edit_conf(self, ct: Container, target: _Target, step: EditConf) -> None:
        """Rewrite the config file on the node, refusing if it changed since we read it."""
        vmid = _vmid(target)
        conn = self.node_conn(ct, target.node)
        path = f"/etc/pve/nodes/{target.node}/lxc/{vmid}.conf"
        raw = get_bytes(conn, path, max_bytes=1 << 20)
        digest = hashlib.sha1(raw).hexdigest()
        api_digest = self.client(ct).ct_config(target.node, vmid).get("digest")
        if api_digest and api_digest != digest:
            raise _Replan(f"CT {vmid} config changed while reading it")
        new = edit_conf_text(raw.decode(), step.add, step.remove)
        if new.encode() == raw:
            return
        q = shlex.quote(path)
        # the content travels in the command (invoke feeds stdin a byte at a time: slow)
        payload = base64.b64encode(new.encode()).decode()
        script = (
            f'd=$(sha1sum < {q} | cut -c1-40); if [ "$d" != {digest} ]; then '
            'echo "detected modified configuration" >&2; exit 3; fi; '
            f"echo {payload} | base64 -d > {q}.tmp.$$ && mv {q}.tmp.$$ {q}"
        )
        result = conn.run(script, ok_codes=(0, 3), display=f"rewrite {path}")
        if result.exit_code == 3:
            raise _Replan(f"CT {vmid} config changed while editing it")

    def _power(self, ct: Container, target: _Target, action: str) -> None:
        client = self.client(ct)
        vmid = _vmid(target)
        path = client.ct_path(target.node, vmid, "status", action)
        try:
            client.run_task(
                f"CT {vmid}: {action}",
                lambda: str(client.post(path)),
                timeout_s=self.options.task_timeout_s,
                lock_wait_s=self.options.lock_wait_s,
                progress=self.say,
            )
        except ProxmoxError as exc:
            # a concurrent provision got there first: whatever the state is, plan from it
            if "already running" in exc.message or "not running" in exc.message:
                raise _Replan(f"CT {vmid} changed state meanwhile") from None
            raise

    # ------------------------------------------------------------------ address and SSH

    def _address(self, ct: Container, node: str, vmid: int, timeout_s: float) -> str:
        """The address to SSH to: ``ssh.host``, else what PVE reports, else the static one."""
        if ct.ssh.host:
            return ct.ssh.host
        static = ct.network.address
        version = self.site_facts(ct, node).api_version
        if not pve_supports_interfaces(version):
            if static is None:
                raise ProvisionError(
                    f"PVE {version} cannot report a DHCP address (needs 8.1)",
                    hint="set ssh.host or a static network.ip",
                )
            return static
        client = self.client(ct)
        end = time.monotonic() + timeout_s
        while True:
            for iface in client.ct_interfaces(node, vmid):
                inet = str(iface.get("inet") or "")
                if iface.get("name") == "eth0" and inet:
                    found = inet.split("/", 1)[0]
                    if static is not None and found != static:
                        self.say(f"{ct.name}: eth0 has {found}, the inventory says {static}")
                    return found
            if time.monotonic() > end:
                if static is not None:
                    return static
                raise ProvisionError(f"CT {vmid} reported no eth0 address in {timeout_s:.0f}s")
            time.sleep(0.5)

    def _ssh(
        self, ct: Container, address: str, *, deadline: float, attempts: int = 3
    ) -> SshConnection:
        return SshConnection.from_access(
            ct.ssh,
            host=address,
            deadline=deadline,
            connect_timeout=min(10.0, deadline),
            connect_attempts=attempts,
            name=ct.name,
        )

    def _wait_ssh(self, ct: Container, address: str) -> SshConnection:
        """Port 22 open, then a real login (host key verified), within ``ssh_timeout_s``."""
        end = time.monotonic() + self.options.ssh_timeout_s
        port = ct.ssh.port
        self.say(f"{ct.name}: waiting for SSH on {address}:{port}")
        while not _port_open(address, port):
            if time.monotonic() > end:
                raise ProvisionError(
                    f"{address}:{port} did not open in {self.options.ssh_timeout_s:.0f}s"
                )
            time.sleep(0.5)
        while True:
            conn = self._ssh(ct, address, deadline=max(end - time.monotonic(), 5.0), attempts=1)
            try:
                conn.run("true", deadline=30.0)
                return conn
            except HostKeyError:
                conn.close()
                raise
            except (RemoteConnectError, RemoteError) as exc:
                conn.close()
                if time.monotonic() > end:
                    raise ProvisionError(f"cannot log in over SSH: {exc.one_line()}") from None
                time.sleep(1.0)


# --------------------------------------------------------------------------- helpers


def _concerns(ct: Container, resource: Resource) -> bool:
    """Whether a lock on ``resource`` blocks planning ``ct`` (ours, or our fixed vmid)."""
    return resource.name == ct.name or (isinstance(ct.vmid, int) and resource.vmid == ct.vmid)


def _vmid(target: _Target) -> int:
    if target.vmid is None:
        raise ProvisionError("the container has no vmid yet (internal error)")
    return target.vmid


def _public_key(ct: Container) -> str | None:
    if ct.ssh.key_file is None:
        return None
    path = Path(f"{ct.ssh.key_file.expanduser()}.pub")
    try:
        return path.read_text().strip() + "\n"
    except OSError:
        return None


def _port_open(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
        return True
    return False


def _retry_remote_locked(fn: Callable[[], object], wait_s: float) -> None:
    """``pct`` says "CT is locked" like the API does: wait for the lock, bounded."""
    end = time.monotonic() + wait_s
    while True:
        try:
            fn()
            return
        except RemoteError as exc:
            locked = is_locked(ProxmoxError(exc.message))
            if not locked or time.monotonic() > end:
                raise
            time.sleep(1.0)


def _record_guest(entry: ContainerReport, guest: GuestPlan) -> None:
    entry.guest_rows = list(guest.rows)
    entry.guest_steps = [step.describe() for step in guest.steps]
    entry.guest_plan_only = [step.describe() for step in guest.plan_only]
    entry.warnings += guest.warnings
