"""Running a container plan's PVE steps, each guarded against losing a race.

A step that finds PVE changed under it (the digest moved, the vmid was just taken, the container
started or stopped meanwhile, a concurrent auto-vmid create won) raises
:class:`~dflashops.proxmox.errors.Replan`; the caller then plans again from what is there now.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from dflashops.errors import ProxmoxError, RemoteError
from dflashops.inventory.models import Container
from dflashops.progress import Say
from dflashops.proxmox.client import is_already_exists, is_digest_conflict, is_locked
from dflashops.proxmox.containerplan import (
    CreateCt,
    DownloadTemplate,
    EditConf,
    PctSet,
    RebootCt,
    StartCt,
    Step,
    UpdateConfig,
)
from dflashops.proxmox.errors import ProvisionError, Replan
from dflashops.proxmox.passthrough import edit_conf_text
from dflashops.proxmox.session import PveSession
from dflashops.remote import get_bytes


@dataclass
class Target:
    """Where a container is while its plan is applied (a create learns its vmid)."""

    vmid: int | None
    node: str

    def require_vmid(self) -> int:
        if self.vmid is None:
            raise ProvisionError("the container has no vmid yet (internal error)")
        return self.vmid


class StepRunner:
    """Runs one container's PVE steps through a session's API client and node connection;
    ``say`` is the container's progress."""

    def __init__(self, session: PveSession, ct: Container, target: Target, say: Say) -> None:
        self.session = session
        self.ct = ct
        self.target = target
        self.options = session.options
        self.say = say
        self.client = session.client(ct)

    def run(self, step: Step) -> None:
        if isinstance(step, DownloadTemplate):
            self._download(step)
        elif isinstance(step, CreateCt):
            self.target.vmid = self._create(step)
        elif isinstance(step, UpdateConfig):
            self._update(step)
        elif isinstance(step, PctSet):
            self._pct_set(step)
        elif isinstance(step, EditConf):
            self._edit_conf(step)
        elif isinstance(step, StartCt):
            self._power("start")
        elif isinstance(step, RebootCt):
            self._power("reboot")

    def _download(self, step: DownloadTemplate) -> None:
        """One download per template and node: containers that need the same one wait for the
        first and find it there (PVE would download it twice, into one file)."""
        node, session = self.target.node, self.session
        with session.one_at_a_time(("template", self.ct.cluster, node, step.template)):
            present = session.site_facts(self.ct, node).templates
            if f"{step.storage}:vztmpl/{step.template}" in present:
                self.say(f"template {step.template} is there now")
                return
            self.client.download_template(node, step.storage, step.template, progress=self.say)
            session.site_facts(self.ct, node, fresh=True)

    def _update(self, step: UpdateConfig) -> None:
        vmid = self.target.require_vmid()
        try:
            self.client.ct_update(
                self.target.node,
                vmid,
                dict(step.params),
                delete=list(step.delete),
                digest=step.digest,
                lock_wait_s=self.options.lock_wait_s,
                progress=self.say,
            )
        except ProxmoxError as exc:
            if is_digest_conflict(exc):
                raise Replan(f"CT {vmid} config changed meanwhile") from None
            raise

    def _create(self, step: CreateCt) -> int:
        node, params = self.target.node, dict(step.params)
        attempts = 1 if step.vmid is not None else 10
        for _ in range(attempts):
            vmid = step.vmid if step.vmid is not None else self._allocate_vmid()
            try:
                upid = str(self.client.post(f"nodes/{node}/lxc", vmid=vmid, **params))
            except ProxmoxError as exc:
                if not is_already_exists(exc):
                    raise
                if step.vmid is not None:
                    raise Replan(f"vmid {vmid} was just taken") from None
                self.say(f"vmid {vmid} was just taken; trying the next one")
                continue
            self.say(f"creating CT {vmid}")
            self.client.wait_task(upid, timeout_s=self.options.task_timeout_s, progress=self.say)
            if step.vmid is None:
                self._ensure_single(vmid)
            return vmid
        raise ProvisionError(f"no free vmid after {attempts} attempts (others create too?)")

    def _allocate_vmid(self) -> int:
        return self.session.clusters.allocate_vmid(self.ct.cluster, self.options.vmid_floor)

    def _ensure_single(self, mine: int) -> None:
        """After an auto-vmid create: if a concurrent provision made one too, the lowest vmid
        stays and the others' creators remove their own (never someone else's), then plan
        again for the one that stays."""
        client, name, clusters = self.client, self.ct.name, self.session.clusters
        end = time.monotonic() + self.options.lock_wait_s
        while True:
            # read after my create ended (one read serves every container that waits for one)
            resources = clusters.resources(self.ct.cluster, not_before=clusters.now())
            # a create in progress may not have its hostname yet: PVE shows it as CT<vmid>
            creating = [
                r
                for r in resources
                if r.lock == "create" and r.vmid != mine and r.name in (name, f"CT{r.vmid}")
            ]
            if not creating or time.monotonic() > end:
                break
            time.sleep(0.3)
        same = sorted(r.vmid for r in resources if r.name == name and r.managed)
        if len(same) <= 1 or same[0] == mine:
            return
        winner = same[0]
        self.say(f"vmid {winner} was created concurrently; removing my CT {mine}")
        client.run_task(
            f"destroy duplicate CT {mine}",
            lambda: str(client.delete(f"nodes/{self.target.node}/lxc/{mine}", purge=1)),
            lock_wait_s=self.options.lock_wait_s,
        )
        raise Replan(f"vmid {winner} was created concurrently")

    def _pct_set(self, step: PctSet) -> None:
        """``pct set`` on the node, only while the config is still the one the API showed."""
        node, vmid = self.target.node, self.target.require_vmid()

        def attempt() -> None:
            digest = self.client.ct_config(node, vmid).get("digest", "")
            script = pct_set_script(node, vmid, str(digest), step.options)
            with self.session.on_node(self.ct, node) as conn:
                result = conn.run(
                    script, ok_codes=(0, 3), deadline=120.0, display=f"pct set {vmid}"
                )
            if result.exit_code == 3:
                raise Replan(f"CT {vmid} config changed meanwhile")

        _retry_remote_locked(attempt, self.options.lock_wait_s)

    def _edit_conf(self, step: EditConf) -> None:
        """Rewrite the config file on the node, refusing if it changed since we read it."""
        node, vmid = self.target.node, self.target.require_vmid()
        path = conf_path(node, vmid)
        with self.session.on_node(self.ct, node) as conn:
            raw = get_bytes(conn, path, max_bytes=1 << 20)
        digest = hashlib.sha1(raw).hexdigest()
        api_digest = self.client.ct_config(node, vmid).get("digest")
        if api_digest and api_digest != digest:
            raise Replan(f"CT {vmid} config changed while reading it")
        new = edit_conf_text(raw.decode(), step.add, step.remove)
        if new.encode() == raw:
            return
        script = rewrite_conf_script(path, digest, new)
        with self.session.on_node(self.ct, node) as conn:
            result = conn.run(script, ok_codes=(0, 3), display=f"rewrite {path}")
        if result.exit_code == 3:
            raise Replan(f"CT {vmid} config changed while editing it")

    def _power(self, action: str) -> None:
        client, vmid = self.client, self.target.require_vmid()
        path = client.ct_path(self.target.node, vmid, "status", action)
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
                raise Replan(f"CT {vmid} changed state meanwhile") from None
            raise


def conf_path(node: str, vmid: int) -> str:
    return f"/etc/pve/nodes/{node}/lxc/{vmid}.conf"


def pct_set_script(node: str, vmid: int, digest: str, options: tuple[tuple[str, str], ...]) -> str:
    """``pct set`` on the node, only while the config file's sha1 is ``digest`` (else exit 3)."""
    q = shlex.quote
    args = " ".join(f"{q('-' + key)} {q(value)}" for key, value in options)
    return (
        f'[ "$(sha1sum < {q(conf_path(node, vmid))} | cut -c1-40)" = {q(digest)} ] || '
        '{ echo "detected modified configuration" >&2; exit 3; }; '
        f"pct set {int(vmid)} {args}"
    )


def rewrite_conf_script(path: str, digest: str, text: str) -> str:
    """Replace the config file with ``text``, only while its sha1 is ``digest`` (else exit 3)."""
    q = shlex.quote(path)
    # the content travels in the command (invoke feeds stdin a byte at a time: slow)
    payload = base64.b64encode(text.encode()).decode()
    return (
        f'd=$(sha1sum < {q} | cut -c1-40); if [ "$d" != {shlex.quote(digest)} ]; then '
        'echo "detected modified configuration" >&2; exit 3; fi; '
        f"echo {payload} | base64 -d > {q}.tmp.$$ && mv {q}.tmp.$$ {q}"
    )


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
