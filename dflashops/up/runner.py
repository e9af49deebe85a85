"""Run ``up``: resolve the pairs, plan each from its record, run the pairs in parallel.

Each pair runs in its own thread: its provision step up to the inventory's ``parallel`` pairs
at once, the loop after it up to 2 (:mod:`dflashops.up.slots`; ``--parallel N`` sets both), a
dry run, which only reads, the inventory's ``parallel`` at once; a pair's failure is its own and
never stops the others. Ctrl-C sets a stop flag: every
pair finishes the step it is in (a launch that fails meanwhile rolls back as ``launch`` does)
and stops before its next one; the record says where, and the next ``up`` continues there.

A pair reaches its container through one connection for the whole run, opened when first
needed (after ``provision`` when that runs); its PVE managed check, like every pair's provision
step, uses the run's one PVE session (:mod:`dflashops.up.pve`). The steps, the connect
function, the drafter fingerprint and the serving probe are :class:`~dflashops.up.parts.UpParts`,
so the runner's resume, Ctrl-C, isolation and faults are tested with injected steps
(tests/unit/test_up_runner.py, tests/unit/test_up_faults.py); a run that stops after a step
(the lab demo) passes a shorter step table (:func:`~dflashops.up.steps.steps_until`).

Each pair's run holds the pair's lock (:mod:`dflashops.up.lock`) from reading its record to its
last step: a second ``up`` on the pair fails at once ("busy: …") or, with ``--wait``, queues.
A record that cannot be read fails its pair only, as invalid input (exit 2).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, nullcontext

from dflashops.deployment.access import ContainerAccess
from dflashops.errors import DflashopsError
from dflashops.inventory.load import Inventory
from dflashops.proxmox.fleet import run_each
from dflashops.up.inputs import DrafterFiles, step_inputs
from dflashops.up.lock import WaitStopped, holder_now, take_lock
from dflashops.up.outcome import PairResult, UpResult
from dflashops.up.pairs import Pair, resolve_pairs
from dflashops.up.parts import UpParts
from dflashops.up.plan import (
    STEPS,
    PlannedStep,
    chain_digests,
    input_digests,
    plan_pair,
    runs_anything,
)
from dflashops.up.pve import RunPve
from dflashops.up.record import (
    PairRecord,
    StepRecord,
    now,
    pair_dir,
    read_record,
    save_record,
)
from dflashops.up.request import DEFAULT_PARALLEL, UpRequest
from dflashops.up.slots import Slots
from dflashops.up.steps import PairWork, StepRefused

__all__ = ["NOT_READ", "RESULT", "Event", "UpParts", "run_up"]

# (pair, step or "", message): one line of a pair's progress
Event = Callable[[str, str, str], None]
RESULT = "result"  # the step of a pair's last event: its result line
NOT_READ = DrafterFiles(None, None, "not read: provision runs first")


def run_up(
    inventory: Inventory,
    request: UpRequest,
    *,
    on_event: Event | None = None,
    stop: threading.Event | None = None,
    parts: UpParts | None = None,
) -> UpResult:
    """Plan (``dry_run``) or run every pair; Ctrl-C stops them at a safe point (module doc)."""
    pairs = resolve_pairs(inventory, request)
    tell = on_event or (lambda _p, _s, _m: None)
    stop = stop or threading.Event()
    parts = parts or UpParts()
    result = UpResult(pairs=[], state_dir=request.state_dir, dry_run=request.dry_run)
    pve = RunPve(inventory)
    fleet = request.parallel or inventory.parallel
    slots = Slots(provision=fleet, loop=request.parallel or DEFAULT_PARALLEL)
    runs = [_PairRun(inventory, request, pair, tell, parts, pve=pve, slots=slots) for pair in pairs]
    try:
        if request.dry_run:
            result.pairs = run_each(runs, _PairRun.plan_and_say, parallel=fleet)
        else:
            _run_all(runs, stop, result, tell)
    finally:
        pve.close()
    return result


def _run_all(runs: list[_PairRun], stop: threading.Event, result: UpResult, tell: Event) -> None:
    # a thread per pair: the slots bound what runs; a pair waiting for one holds only its thread
    with ThreadPoolExecutor(max_workers=max(len(runs), 1), thread_name_prefix="up") as pool:
        futures: dict[Future[PairResult], _PairRun] = {pool.submit(r.run, stop): r for r in runs}
        pending = set(futures)
        while pending:
            try:
                _done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:
                stop.set()
                result.interrupted = True
                for run in runs:
                    tell(run.pair.id, "", "Ctrl-C: stopping after the step in progress")
    result.pairs = [future.result() for future in futures]


class _PairRun:
    """One pair: its lock, its record, its facts, its plan and its steps."""

    def __init__(
        self,
        inventory: Inventory,
        request: UpRequest,
        pair: Pair,
        tell: Event,
        parts: UpParts,
        *,
        pve: RunPve,
        slots: Slots,
    ) -> None:
        self.inventory, self.request, self.pair, self.tell = inventory, request, pair, tell
        self.parts = parts
        self.connections = ExitStack()
        self.opened: ContainerAccess | None = None
        self.unreachable: str | None = None  # why the container could not be reached to plan
        self.state = request.state_dir
        self.folder = pair_dir(self.state, pair.id)
        # the record is read under the pair's lock (_load): until then, and when it cannot be
        # read, a fresh one
        self.record = PairRecord(
            pair=pair.id,
            playbook=str(pair.path),
            playbook_name=pair.playbook.name,
            container=pair.container,
            cluster=pair.cluster,
            node=pair.node,
        )
        self.record_read = False
        self.container_doc = inventory.container(pair.container).model_dump(mode="json")
        self.files = DrafterFiles(None, None)
        self.digests: dict[str, str] = {}
        self.own: dict[str, dict[str, str]] = {}
        self.stale: dict[str, str] = {}  # step -> why what it left is gone (plan_pair's stale)
        self.warnings: list[str] = []
        self.pve, self.slots = pve, slots
        self.provisioned_at: float | None = None  # when this run's provision step ended

    def access(self) -> ContainerAccess:
        """The pair's one connection (and PVE's one check that the container is ours)."""
        if self.opened is None:
            name, after = self.pair.container, self.provisioned_at
            if self.parts.connect is not None:
                opened = self.parts.connect(self.inventory, name)
            else:
                opened = self.pve.connect(self.inventory, name, not_before=after)
            self.connections.enter_context(opened)
            if not self.request.dry_run:  # the container's one writer while the pair runs
                wait_s = self.request.wait_timeout_s if self.request.wait else None
                self.connections.enter_context(
                    self.parts.lock(opened.conn, self.pair.container, wait_s)
                )
            self.opened = opened
        return self.opened

    def _load(self, *, keep_aside: bool) -> None:
        """Read the pair's record; an unreadable one fails the pair (exit 2) unless this run
        starts it afresh (``--from provision``)."""
        afresh = self.request.from_step == "provision"
        loaded, warning = read_record(self.state, self.pair.id, afresh=afresh, keep=keep_aside)
        if warning is not None:
            self.warnings.append(warning)
        self.record_read = True
        if loaded is not None:
            loaded.playbook = str(self.pair.path)
            self.record = loaded

    def _read_files(self) -> DrafterFiles:
        try:
            conn = self.access().conn
        except DflashopsError as exc:
            self.unreachable = f"{self.pair.container}: {exc.one_line()}"
            return DrafterFiles(None, None, self.unreachable)
        return self.parts.fingerprint(conn, self.pair.container, self.pair.playbook)

    def _refresh(self, files: DrafterFiles | None = None) -> None:
        """Digest every step's inputs, the drafter's files read in the container unless given."""
        self.files = files if files is not None else self._read_files()
        inputs = step_inputs(self.container_doc, self.pair.playbook, self.files)
        self.digests = chain_digests(inputs)
        self.own = {step: input_digests(inputs[step]) for step in STEPS}

    def _plan_with(self) -> list[PlannedStep]:
        return plan_pair(
            self.record if self.record.steps else None,
            self.digests,
            self.own,
            from_step=self.request.from_step,
            until=self.parts.until,
            force=self.request.force,
            stale=self.stale,
        )

    def _plan(self, *, keep_aside: bool) -> list[PlannedStep]:
        self.tell(self.pair.id, "", "reading the run record")
        self._load(keep_aside=keep_aside)
        # a provision that runs reruns every step after it: the container need not be read yet
        # (it may not exist), and the digests are taken again once it is there
        self._refresh(NOT_READ)
        plan = self._plan_with()
        if plan[0].action == "run":
            return plan
        self.tell(self.pair.id, "", "reading the drafter's files")
        self._refresh()
        return self._check_serving(self._plan_with())

    def _check_serving(self, plan: list[PlannedStep]) -> list[PlannedStep]:
        """A launch done with the same inputs is skipped only while its server serves: one
        killed since (or never answering) is started again, and the steps after it follow."""
        if next(p.action for p in plan if p.step == "launch") != "skip":
            return plan  # it runs anyway, or this run stops before it, or it never succeeded
        self.tell(self.pair.id, "", "checking that the server launch started is serving")
        why = self.unreachable
        if why is None:
            try:
                why = self.parts.serving(self.access().conn, self.pair.playbook.name)
            except DflashopsError as exc:
                why = exc.one_line()
        if why is None:
            return plan
        self.stale["launch"] = f"the server it launched is not serving ({why})"
        return self._plan_with()

    def _result(self, plan: list[PlannedStep]) -> PairResult:
        return PairResult(
            pair=self.pair.id,
            container=self.pair.container,
            playbook=str(self.pair.path),
            plan=plan,
            record=self.record if self.record_read else None,
            warnings=self.warnings,
        )

    def _failed(self, exc: Exception) -> PairResult:
        """The pair failed before its first step (its lock, its record, its plan)."""
        result = self._result([])
        result.outcome = "failed"
        result.error = exc.one_line() if isinstance(exc, DflashopsError) else repr(exc)
        result.invalid_input = isinstance(exc, DflashopsError) and exc.cli_exit_code == 2
        return result

    def plan_only(self) -> PairResult:
        """The pair's plan (a dry run): takes no lock, but says who holds it."""
        with self.connections:
            try:
                busy = holder_now(self.folder)
                plan = self._plan(keep_aside=False)
            except Exception as exc:  # e.g. an unreadable record: the other pairs are planned
                return self._failed(exc)
        result = self._result(plan)
        result.last_step = next((p.step for p in reversed(plan) if p.action == "run"), None)
        if busy is not None:
            result.notes.append(f"busy: {busy}; its run may change what this plan says")
        if self.files.note and self.pair.playbook.drafter.model is not None:
            result.notes.append(self.files.note)
        return result

    def plan_and_say(self) -> PairResult:
        """:meth:`plan_only`, its result line the pair's last event (step :data:`RESULT`)."""
        result = self.plan_only()
        self.tell(self.pair.id, RESULT, result.line())
        return result

    def run(self, stop: threading.Event) -> PairResult:
        """The pair's run under its lock; the pair's connection closes with it. Its last event
        (step :data:`RESULT`) is the pair's result line."""
        result = self._locked_run(stop)
        self.tell(self.pair.id, RESULT, result.line())
        return result

    def _locked_run(self, stop: threading.Event) -> PairResult:
        wait_s = self.request.wait_timeout_s if self.request.wait else None
        try:
            held = take_lock(self.folder, wait_s=wait_s, on_wait=self._waiting, stop=stop)
        except WaitStopped as exc:
            result = self._result([])
            result.outcome, result.error = "interrupted", exc.one_line()
            return result
        except Exception as exc:  # busy, or the run folder cannot be written
            return self._failed(exc)
        with held, self.connections:
            warning = held.stale_warning()
            if warning is not None:
                self.warnings.append(warning)
                self.tell(self.pair.id, "", f"warning: {warning}")
            return self._run(stop)

    def _waiting(self, who: str, waited_s: float) -> None:
        limit = self.request.wait_timeout_s
        self.tell(self.pair.id, "", f"busy: {who}; waiting ({waited_s:.0f} s of {limit:.0f} s)")

    def _run(self, stop: threading.Event) -> PairResult:
        try:
            plan = self._plan(keep_aside=True)
        except Exception as exc:  # e.g. an unreadable record: this pair fails, the rest go on
            return self._failed(exc)
        result = self._result(plan)
        if not runs_anything(plan):
            result.outcome = "unchanged"
            return result
        work = PairWork(
            inventory=self.inventory,
            playbook=self.pair.playbook,
            playbook_path=self.pair.path,
            container=self.pair.container,
            record=self.record,
            run_dir=self.folder,
            say=lambda message: None,
            access=self.access,
            fix_drafter=self.request.fix_drafter,
            force=self.request.force,
            drafter_files=self.files,
            pve=self.pve.session,
        )
        work.run_dir.mkdir(parents=True, exist_ok=True)
        # every step this run means to run is pending until it ran: a run stopped early (Ctrl-C,
        # a failure) leaves them so, and the next run runs them, not their older results
        for planned in plan:
            if planned.action == "run":
                self.record.steps[planned.step] = StepRecord(status="pending")
        save_record(self.state, self.record)
        looping = False
        try:
            for planned in plan:
                if planned.action != "run":
                    continue
                result.last_step = planned.step
                if planned.step != "provision" and not looping:
                    looping = self.slots.enter_loop(stop, self._queued)
                if stop.is_set():
                    result.outcome = "interrupted"
                    return result
                with self.slots.provisioning() if planned.step == "provision" else nullcontext():
                    ok = self._step(planned.step, work, result)
                if not ok:
                    result.outcome = "failed"
                    return result
        finally:
            if looping:
                self.slots.leave_loop()
        result.outcome = "stopped" if self.parts.until else "done"
        return result

    def _queued(self) -> None:
        size = self.slots.loop_size
        self.tell(self.pair.id, "", f"waiting: {size} pair(s) run past provision at once")

    def _step(self, step: str, work: PairWork, result: PairResult) -> bool:
        """Run one step and record it; False when it failed."""
        pid = self.pair.id
        work.say = lambda message: self.tell(pid, step, message)
        started, clock = now(), time.monotonic()
        self.record.steps[step] = StepRecord(status="running", started_at=started)
        save_record(self.state, self.record)
        self.tell(pid, step, "starting")
        entry = StepRecord(status="ok", started_at=started)
        try:
            entry.summary, output = self.parts.steps[step](work)
            entry.outputs = output.to_record()
        except StepRefused as exc:
            entry.status, entry.error = "failed", exc.one_line()
            entry.outputs = exc.output.to_record()
        except DflashopsError as exc:
            entry.status, entry.error = "failed", exc.one_line()
        except Exception as exc:  # a bug or a library's error: this pair fails, the rest go on
            entry.status, entry.error = "failed", f"{type(exc).__name__}: {exc}"
        if step == "provision":
            self.provisioned_at = self.pve.clusters.now()
        if entry.status == "ok" and step in ("provision", "drafter"):
            work.say("reading the drafter's files again")
            self._refresh()  # the container exists now, or the drafter config was pushed
            work.drafter_files = self.files
        entry.digest, entry.inputs = self.digests[step], self.own[step]
        entry.forced = step == "drafter" and work.forced
        entry.finished_at = now()
        entry.seconds = round(time.monotonic() - clock, 1)
        self.record.steps[step] = entry
        save_record(self.state, self.record)
        result.ran.append(step)
        if entry.status != "ok":
            result.error = entry.error
            self.tell(pid, step, f"failed: {entry.error}")
            return False
        self.tell(pid, step, entry.summary)
        return True
