"""``launch``: render, compare, validate, push in one transaction, (re)start, wait for readiness,
and on failure name the cause, restore the previous files and restart the previous server.

Steps (facts → plan → apply):

1. facts: run state (pids, systemd), the deployed manifest, the engine venv, the drafter and
   target files (validated locally, see :mod:`dflashops.launch.validation`), the sha256 of every
   managed file;
2. plan: render the files, compare, decide whether anything must restart; ``dry_run`` stops here;
3. apply: repair the engine venv and dflashops' wheel (never needs a restart: the running engine
   no longer uses dflashops), push every file in one ``put_files`` transaction, stop the old
   server, start the new one and wait until it answers a 1-token completion;
4. on failure: stop the new server, put the backups of the replaced files back (and remove the
   files it created), start the previous server again and wait for it; raise
   :class:`~dflashops.launch.report.LaunchFailed` with the cause and the log tail.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

from dflashops.deployment.access import ContainerAccess, connect, server_address
from dflashops.deployment.api_key import server_api_key
from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.deployment.manifest import (
    DeployedFile,
    DeployedManifest,
    read_manifest,
    write_manifest,
)
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import LocalWheel, local_wheel
from dflashops.errors import DflashopsError, RemoteError
from dflashops.inventory.load import Inventory
from dflashops.launch import lifecycle
from dflashops.launch.diagnose import diagnose
from dflashops.launch.endpoint import base_url, endpoint_host
from dflashops.launch.multinode import placement_aware
from dflashops.launch.plan import decide, file_changes, remote_shas, spec_diff
from dflashops.launch.readiness import HttpProber, ReadinessResult, wait_ready
from dflashops.launch.render import Rendered, RenderInputs, render, venv_python
from dflashops.launch.report import LaunchFailed, LaunchRefused, LaunchReport
from dflashops.launch.rollback import Attempt, endpoint_of, failure_of, restore
from dflashops.launch.validation import DrafterValidation, validate
from dflashops.playbook.models import Playbook
from dflashops.progress import Say, quiet
from dflashops.remote import FileUpload, SshConnection, get_text, put_files

DEFAULT_READY_TIMEOUT_S = 900.0
LOG_TAIL_LINES = 25


@placement_aware  # a playbook with a placement: launch_placement, across its members
def launch(
    inventory: Inventory,
    container_name: str,
    playbook: Playbook,
    *,
    dry_run: bool = False,
    force: bool = False,
    progress: Say | None = None,
    warn: Say | None = None,
    timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
    wheel: LocalWheel | None = None,
    layout: Layout = DEFAULT_LAYOUT,
) -> LaunchReport:
    """Deploy ``playbook`` to ``container_name`` and wait until it serves (see module doc).

    ``warn`` is told each warning as it arises (e.g. ``--force`` over drafter errors), before
    anything changes; the report repeats them."""
    say = progress or quiet
    api_key = server_api_key(
        playbook.server.api_key_env,
        os.environ if environ is None else environ,
        whose=f"playbook {playbook.name}",
    )
    target = connect(inventory, container_name)
    host = endpoint_host(playbook, server_address(target.container) or target.address)
    say("building dflashops' wheel")
    wheel = wheel or local_wheel()
    with target.conn as conn:
        steps = _Launch(
            target=target,
            conn=conn,
            playbook=playbook,
            host=host,
            api_key=api_key,
            wheel=wheel,
            layout=layout,
            say=say,
            warn=warn or quiet,
            timeout_s=timeout_s,
            force=force,
        )
        return steps.run(dry_run)


class _Launch:
    """One launch's state; methods are its steps."""

    def __init__(
        self,
        *,
        target: ContainerAccess,
        conn: SshConnection,
        playbook: Playbook,
        host: str,
        api_key: str | None,
        wheel: LocalWheel,
        layout: Layout,
        say: Say,
        warn: Say,
        timeout_s: float,
        force: bool,
    ) -> None:
        self.target = target
        self.conn = conn
        self.playbook = playbook
        self.host = host
        self.api_key = api_key
        self.wheel = wheel
        self.layout = layout
        self.say = say
        self.warn = warn
        self.timeout_s = timeout_s
        self.force = force
        self.endpoint = base_url(host, playbook.server.port) + "/v1"
        self.warnings: list[str] = []

    # ------------------------------------------------------------------ facts and plan

    def run(self, dry_run: bool) -> LaunchReport:
        conn, layout = self.conn, self.layout
        self.say(f"reading {self.target.name} ({self.target.address})")
        state = lifecycle.run_state(conn, layout)
        manifest = read_manifest(conn, layout)
        wanted = engine_venv.VenvWanted(self.playbook.engine, self.wheel, layout)
        venv_facts = engine_venv.probe(conn, wanted)
        venv_plan = engine_venv.plan(venv_facts, wanted)
        self.say("validating the drafter")
        validation, target_facts = validate(conn, self.playbook)
        forced = self._judge(validation)
        rendered = render(
            self.playbook,
            RenderInputs(
                supervisor="systemd" if state.systemd else "fallback",
                venv_python=venv_python(self.playbook, layout),
                required_env=validation.required_env,
                skip_drafter_validation=forced,
                api_key=self.api_key,
                target=target_facts,
                layout=layout,
            ),
        )
        remote = remote_shas(conn, rendered.paths)
        changes = file_changes(rendered, remote)
        decision = decide(changes, state, manifest)
        report = LaunchReport(
            container=self.target.name,
            host=self.target.address,
            playbook=self.playbook.name,
            action="dry-run",
            restart_needed=decision.restart,
            reason=decision.reason,
            endpoint=self.endpoint,
            supervisor=rendered.supervisor,
            engine_venv=[f"{a.kind}: {a.detail}" for a in venv_plan.actions],
            engine_venv_noop=venv_plan.noop_reason,
            files=changes,
            spec_changes=spec_diff(manifest.spec if manifest else None, rendered.spec.to_dict()),
            drafter_validation=validation.status,
            drafter_findings=validation.lines(),
            forced=forced,
            warnings=self.warnings,
        )
        if dry_run:
            report.diffs = self._diffs(rendered, changes)
            return report
        if not venv_plan.empty:
            self.say("preparing the engine venv: " + ", ".join(a.kind for a in venv_plan.actions))
            engine_venv.apply(conn, wanted, venv_plan, venv_facts)
            venv_facts = engine_venv.probe(conn, wanted)
        engine_venv.check_ready(venv_facts, wanted)
        if not decision.restart:
            assert manifest is not None and state.server_pid is not None
            report.action = "unchanged"
            report.pid = state.server_pid
            report.serving_since = manifest.started_at if manifest.pid == state.server_pid else None
            report.started_at = report.serving_since
            return report
        return self._deploy(
            report=report,
            rendered=rendered,
            state=state,
            manifest=manifest,
            validation=validation,
            forced=forced,
        )

    def _judge(self, validation: DrafterValidation) -> bool:
        """Refuse a failing drafter check unless forced; True when forced over errors."""
        for line in validation.lines("warning"):
            self._warn(f"drafter check: {line}")
        if not validation.failed:
            return False
        errors = validation.lines("error")
        if not self.force:
            raise LaunchRefused(
                f"drafter check found {len(errors)} error(s): " + "; ".join(errors[:3]),
                hint="fix the drafter (`dflashops drafter check`), or --force to launch anyway",
            )
        self._warn(
            f"--force: LAUNCHING OVER {len(errors)} DRAFTER ERROR(S); the server's preflight "
            "will not validate the drafter either"
        )
        for line in errors:
            self._warn(f"drafter check: {line}")
        return True

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.warn(message)

    def _diffs(self, rendered: Rendered, changes: Sequence[Any]) -> dict[str, str]:
        diffs = {}
        for change in changes:
            if change.action != "update" or change.secret:
                continue
            new = rendered.file(change.path).content.decode()
            old = get_text(self.conn, change.path)
            diffs[change.path] = "".join(
                difflib.unified_diff(
                    old.splitlines(keepends=True),
                    new.splitlines(keepends=True),
                    fromfile=f"deployed {change.path}",
                    tofile=f"rendered {change.path}",
                )
            )
        return diffs

    # ------------------------------------------------------------------ apply

    def _deploy(
        self,
        *,
        report: LaunchReport,
        rendered: Rendered,
        state: lifecycle.RunState,
        manifest: DeployedManifest | None,
        validation: DrafterValidation,
        forced: bool,
    ) -> LaunchReport:
        conn, layout = self.conn, self.layout
        systemd = rendered.supervisor == "systemd"
        self.say(f"pushing {len(rendered.files)} files")
        uploads = [FileUpload(f.path, f.content, f.mode) for f in rendered.files]
        pushed = put_files(conn, uploads)
        try:
            if state.running:
                self.say(f"stopping the running server (pid {state.server_pid})")
                lifecycle.stop(conn, systemd=systemd, layout=layout)
            before = lifecycle.run_state(conn, layout)
        except DflashopsError:
            restore(conn, pushed)  # the old server may still run: give it its files back
            raise
        attempt = Attempt(before, pushed, state.running, manifest, systemd)
        started_at = datetime.now(UTC)
        self.say("starting the server")
        try:
            pid = lifecycle.start(conn, before, systemd=systemd, layout=layout)
        except DflashopsError as exc:
            self._fail(attempt, exc.message, None)
        result = self._wait(pid, before, self.playbook.served_name, self.endpoint)
        if not result.ready:
            self._fail(attempt, *failure_of(result, self.timeout_s))
        exec_env, p2p = self._preflight_facts()
        new_manifest = DeployedManifest(
            playbook=self.playbook.name,
            container=self.target.name,
            engine=self.playbook.engine.name,
            engine_version=self.playbook.engine.version,
            dflashops_version=self.wheel.version,
            dflashops_wheel_sha256=self.wheel.sha256,
            supervisor=rendered.supervisor,
            files=[DeployedFile(path=f.path, sha256=f.sha256, mode=f.mode) for f in rendered.files],
            spec=rendered.spec.to_dict(),
            speculative_config=_speculative(rendered.spec.argv),
            method=self.playbook.drafter.method,
            num_speculative_tokens=self.playbook.server.num_speculative_tokens,
            served_model_name=self.playbook.served_name,
            host=self.playbook.server.host,
            port=self.playbook.server.port,
            endpoint=self.endpoint,
            api_key_env=self.playbook.server.api_key_env,
            pid=pid,
            deployed_at=datetime.now(UTC),
            started_at=started_at,
            ready_in_s=round(result.elapsed_s, 1),
            drafter_validation=validation.status + (" (forced)" if forced else ""),
            forced=forced,
            exec_env=exec_env,
            nccl_p2p_disable=p2p,
        )
        write_manifest(conn, new_manifest, layout)
        report.action = "restarted" if state.running else "started"
        report.pid = pid
        report.started_at = started_at
        report.serving_since = started_at
        report.ready_in_s = round(result.elapsed_s, 1)
        report.phases = {str(k): round(v, 1) for k, v in result.reached.items()}
        return report

    def _wait(
        self, pid: int, before: lifecycle.RunState, model: str, endpoint: str
    ) -> ReadinessResult:
        watcher = lifecycle.Watcher(
            self.conn, self.layout, pid, before.events_size, before.log_size
        )
        prober = HttpProber(endpoint.removesuffix("/v1"), model, self.api_key)
        try:
            return wait_ready(
                watcher, prober, model=model, timeout_s=self.timeout_s, progress=self.say
            )
        finally:
            prober.close()

    def _preflight_facts(self) -> tuple[dict[str, str], bool]:
        try:
            report = json.loads(get_text(self.conn, self.layout.preflight_report))
        except (RemoteError, ValueError):
            return {}, False
        exec_env = {str(k): str(v) for k, v in dict(report.get("exec_env") or {}).items()}
        return exec_env, bool(report.get("nccl_p2p_disable"))

    # ------------------------------------------------------------------ failure

    def _fail(self, attempt: Attempt, message: str, exit_code: int | None) -> NoReturn:
        conn, layout = self.conn, self.layout
        if exit_code is None:
            exit_code = lifecycle.exit_code_since(conn, layout, attempt.before.events_size)
        log_text = lifecycle.log_since(conn, layout, attempt.before.log_size)
        cause = diagnose(log_text, exit_code)
        tail = lifecycle.tail_of(log_text, LOG_TAIL_LINES)
        self.say("failed; stopping it and restoring the previous files")
        lifecycle.stop(conn, systemd=attempt.systemd, layout=layout)
        restore(conn, attempt.pushed)
        previous_serving: bool | None = None
        if attempt.was_running:
            previous_serving = self._restart_previous(attempt.manifest, attempt.systemd)
        summary = cause.summary if cause else message
        restored = any(r.backup for r in attempt.pushed)
        previous = endpoint_of(attempt.manifest)
        outcome = {
            None: "the previous files were restored (nothing was serving before)"
            if restored
            else "nothing was deployed before; the new files were removed",
            True: f"rolled back; the previous server serves again at {previous}",
            False: "rolled back, but the previous server did not come back",
        }[previous_serving]
        raise LaunchFailed(
            f"{summary} ({message}); {outcome}",
            cause=cause,
            log_tail=tail,
            rolled_back=True,
            previous_serving=previous_serving,
            endpoint=previous if previous_serving else None,
            hint=cause.hint if cause else None,
        )

    def _restart_previous(self, manifest: DeployedManifest | None, systemd: bool) -> bool:
        conn, layout = self.conn, self.layout
        self.say("starting the previous server again")
        before = lifecycle.run_state(conn, layout)
        try:
            pid = lifecycle.start(conn, before, systemd=systemd, layout=layout)
        except DflashopsError:
            return False
        if manifest is None:
            return True
        result = self._wait(pid, before, manifest.served_model_name, manifest.endpoint)
        if result.ready:
            updated = manifest.model_copy(
                update={"pid": pid, "started_at": datetime.now(UTC), "ready_in_s": result.elapsed_s}
            )
            write_manifest(conn, updated, layout)
        return result.ready


def _speculative(argv: Sequence[str]) -> dict[str, Any] | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == "--speculative-config":
            data = json.loads(argv[i + 1])
            return data if isinstance(data, dict) else None
    return None
