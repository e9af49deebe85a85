"""The steps of ``up``, each a call of the core function the single command calls.

A step returns ``(summary, output)`` (a typed :class:`~dflashops.up.outputs.StepOutput`) or
raises. What it needs from an earlier step it reads from the pair's record as that step's type
(``LaunchOutput.read(work.record)``), so a step skipped because it had succeeded with the same
inputs still feeds the steps after it. Every step reaches the container through the pair's one
connection (:meth:`PairWork.access`: one PVE managed check per pair per run), and ``launch``
takes the drafter step's judgement instead of checking again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.bench.container import bench_container
from dflashops.bench.models import BenchReport
from dflashops.bench.settings import BenchSettings
from dflashops.deployment.access import ContainerAccess
from dflashops.drafter.push import push_drafter_config
from dflashops.inventory.load import Inventory
from dflashops.launch.core import launch
from dflashops.launch.judge import DrafterJudgement, DrafterRefused, judge_drafter
from dflashops.launch.validation import DrafterValidation
from dflashops.playbook.models import Playbook
from dflashops.progress import Say
from dflashops.proxmox.apply import provision
from dflashops.proxmox.session import PveSession
from dflashops.tune.live import live_tune, playbook_at_k, set_num_speculative_tokens
from dflashops.tune.request import LiveTuneRequest
from dflashops.up.inputs import DrafterFiles, tune_asked, tune_key
from dflashops.up.outputs import (
    BenchNumbers,
    DrafterOutput,
    LaunchOutput,
    ProvisionOutput,
    ReportOutput,
    StepOutput,
    TuneOutput,
)
from dflashops.up.plan import STEPS
from dflashops.up.record import PairRecord, UpError
from dflashops.up.smoke import smoke_request
from dflashops.up.summary import write_run_report
from dflashops.up.tune_load import load_line, relaunch_tuned, tune_for_load

Outcome = tuple[str, StepOutput]
StepFunction = Callable[["PairWork"], Outcome]
BENCH_FILE = "bench.json"
TUNE_FILE = "tune.json"
TUNED_PLAYBOOK = "playbook.tuned.yaml"
PLOT_LOCK = threading.Lock()  # pyplot's state is the process's: one plot at a time
FIX_HINT = "--fix-drafter pushes the registry's certain keys; --force goes on anyway"


@dataclass
class PairWork:
    """One pair's inputs, its connection and shared locks, handed to every step."""

    inventory: Inventory
    playbook: Playbook
    playbook_path: Path
    container: str
    record: PairRecord
    run_dir: Path
    say: Say
    # the pair's one connection, opened on first use (after provision, when that runs)
    access: Callable[[], ContainerAccess]
    fix_drafter: bool = False
    force: bool = False
    drafter_files: DrafterFiles = field(default_factory=lambda: DrafterFiles(None, None))
    # the run's PVE session, shared by every pair's provision (one API login and listing, vmids
    # handed out once, one download of a template per node); None: provision opens its own
    pve: PveSession | None = None
    # matplotlib's pyplot state is process-wide: one pair plots at a time
    plot_lock: threading.Lock = field(default_factory=lambda: PLOT_LOCK)
    # this run's drafter step's verdict, for launch (None: the step did not run this time)
    judgement: DrafterJudgement | None = None

    @property
    def forced(self) -> bool:
        """This run's drafter step went on over errors (``--force``)."""
        return self.judgement is not None and self.judgement.forced


def step_provision(work: PairWork) -> Outcome:
    result = provision(work.inventory, [work.container], progress=work.say, session=work.pve)
    entry = result.container(work.container)
    if not entry.ok:
        raise UpError(f"provision: {entry.error or '; '.join(entry.issues)}")
    action = str(entry.action)
    return action, ProvisionOutput(action=action, vmid=entry.vmid)


class StepRefused(UpError):
    """A step stopped the pair on purpose; ``output`` is recorded with the failure."""

    def __init__(self, message: str, *, output: StepOutput, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.output = output


def step_drafter(work: PairWork) -> Outcome:
    """``drafter check`` as launch judges it (the judgement goes on to launch);
    ``--fix-drafter`` pushes the certain keys first."""
    book, conn = work.playbook, work.access().conn
    pushed: list[str] | None = None
    if work.fix_drafter and book.drafter.method == "dflash" and book.drafter.model is not None:
        result = push_drafter_config(
            work.inventory, work.container, book, progress=work.say, connection=conn
        )
        pushed = [change.key for change in result.changes]
    work.say("checking the drafter")
    try:
        work.judgement = judge_drafter(conn, book, force=work.force)
    except DrafterRefused as exc:
        output = _drafter_output(exc.validation, pushed)
        raise StepRefused(exc.message, output=output, hint=FIX_HINT) from None
    validation = work.judgement.validation
    output = _drafter_output(validation, pushed)
    note = "" if pushed is None else f"pushed {', '.join(pushed) or 'nothing'}; "
    if validation.reason is not None:
        return f"{note}{validation.reason}", output
    if work.judgement.forced:
        errors = len(validation.lines("error"))
        return f"{note}--force over {errors} error(s)", output
    return f"{note}{validation.status}", output


def _drafter_output(validation: DrafterValidation, pushed: list[str] | None) -> DrafterOutput:
    return DrafterOutput(status=validation.status, findings=validation.lines(), pushed_keys=pushed)


def step_launch(work: PairWork) -> Outcome:
    report = launch(
        work.inventory,
        work.container,
        work.playbook,
        force=work.force,
        progress=work.say,
        access=work.access(),
        judgement=work.judgement,
    )
    output = LaunchOutput(
        action=report.action,
        endpoint=report.endpoint,
        forced=report.forced,
        findings=report.drafter_findings,
        k=work.playbook.server.num_speculative_tokens,
    )
    return f"{report.action}: {report.endpoint}", output


def step_smoke(work: PairWork) -> Outcome:
    work.say("one chat request")
    out = smoke_request(LaunchOutput.read(work.record).endpoint, work.playbook)
    tokens = out.usage.get("completion_tokens", "?")
    drafts = out.spec_decode.num_drafts if out.spec_decode else None
    return f"{tokens} tokens" + (f", {drafts} drafts" if drafts else ""), out


def bench_numbers(k: int | None, report: BenchReport, file: Path | None = None) -> BenchNumbers:
    """What the end table and the demo show from a bench: its first level (concurrency 1)."""
    level = report.levels[0]
    return BenchNumbers(
        k=k,
        output_throughput=level.output_throughput,
        median_tpot_ms=level.median_tpot_ms,
        spec_decode_acceptance_length=level.spec_decode_acceptance_length,
        per_position_acceptance=level.spec_decode_per_position_acceptance_rates,
        file=str(file) if file else None,
    )


def step_bench(work: PairWork) -> Outcome:
    settings = BenchSettings.from_playbook(work.playbook)
    report = bench_container(
        work.inventory,
        work.container,
        work.playbook,
        settings,
        progress=work.say,
        connection=work.access().conn,
    )
    path = report.save(work.run_dir / BENCH_FILE)
    numbers = bench_numbers(work.playbook.server.num_speculative_tokens, report, path)
    return numbers.line(), numbers


def step_tune(work: PairWork) -> Outcome:
    """Tune k live (budget and range from the playbook); a k* found earlier for the same
    drafter files and playbook is launched again instead of tuned again."""
    book = work.playbook
    if not tune_asked(book):
        return "not asked (the playbook has no tune section)", TuneOutput(asked=False)
    drafter = work.record.step("drafter")
    if work.forced or (drafter is not None and drafter.forced):
        return "not run: the drafter went on over errors (--force)", TuneOutput()
    key = tune_key(book, work.drafter_files)
    earlier = work.record.tuned.get(key)
    if book.tune.load:
        return _step_tune_load(work, key, earlier)
    if earlier is not None:
        reused = TuneOutput.model_validate({**earlier, "reused": True})
        k = reused.best_k if reused.best_k is not None else book.server.num_speculative_tokens
        assert k is not None  # tune is asked only of a playbook that speculates
        work.say(f"k*={k} tuned earlier for this drafter: launching it")
        launch(
            work.inventory,
            work.container,
            playbook_at_k(book, k),
            progress=work.say,
            access=work.access(),
        )
        return f"k*={k}, tuned earlier for this drafter and playbook", reused
    request = LiveTuneRequest(
        container=work.container,
        playbook=str(work.playbook_path),
        write_playbook=False,  # the operator's playbook stays as written; the copy gets k*
        probe_dir=work.run_dir / "tune",
    )
    result = live_tune(work.inventory, request, say=work.say, access=work.access())
    outcome = result.outcome
    saved = result.report.save(work.run_dir / TUNE_FILE)
    tuned = work.run_dir / TUNED_PLAYBOOK
    text = work.playbook_path.read_text(encoding="utf-8")
    tuned.write_text(set_num_speculative_tokens(text, outcome.best_k), encoding="utf-8")
    numbers = bench_numbers(outcome.best_k, result.report)
    output = TuneOutput(
        **numbers.model_dump(exclude={"file"}),
        best_k=outcome.best_k,
        start_k=outcome.start_k,
        launches=outcome.launches,
        predicted_tok_s=outcome.predicted_tok_s,
        measured_tok_s=outcome.measured_tok_s,
        start_tok_s=outcome.start_tok_s,
        gain=outcome.gain,
        report=str(saved),
        playbook=str(tuned),
    )
    work.record.tuned[key] = output.to_record()
    return _tune_line(output), output


def _step_tune_load(work: PairWork, key: str, earlier: dict[str, Any] | None) -> Outcome:
    """``tune.load``: k per batch size (:mod:`dflashops.up.tune_load`), reused when an earlier
    run tuned it for the same drafter files and playbook."""
    if earlier is not None and earlier.get("load_levels"):
        reused = TuneOutput.model_validate({**earlier, "reused": True})
        line = relaunch_tuned(
            work.inventory,
            work.container,
            work.playbook,
            reused,
            access=work.access(),
            say=work.say,
        )
        return line, reused
    output = tune_for_load(
        work.inventory,
        work.container,
        work.playbook_path,
        work.run_dir,
        access=work.access(),
        say=work.say,
        files=(TUNE_FILE, TUNED_PLAYBOOK),
    )
    work.record.tuned[key] = output.to_record()
    return load_line(output), output


def _tune_line(output: TuneOutput) -> str:
    measured = output.measured_tok_s
    if output.best_k == output.start_k:  # a gain over itself is the benches' noise
        gain = f", the starting k={output.start_k} kept"
    elif output.gain is None:
        gain = ""
    else:
        gain = f", {output.gain:+.0%} over k={output.start_k}"
    shown = "?" if measured is None else f"{measured:.1f}"
    return f"k*={output.best_k}: {shown} tok/s measured{gain} ({len(output.launches)} launches)"


def step_report(work: PairWork) -> Outcome:
    with work.plot_lock:
        files = write_run_report(work.record, work.run_dir)
    return f"{len(files)} files in {work.run_dir}", ReportOutput(files=[str(f) for f in files])


STEP_FUNCTIONS: dict[str, StepFunction] = {
    "provision": step_provision,
    "drafter": step_drafter,
    "launch": step_launch,
    "smoke": step_smoke,
    "bench": step_bench,
    "tune": step_tune,
    "report": step_report,
}


def steps_until(
    last: str, steps: Mapping[str, StepFunction] = STEP_FUNCTIONS
) -> dict[str, StepFunction]:
    """The step table of a run that stops after ``last`` (the steps after it are not asked)."""
    return {name: steps[name] for name in STEPS[: STEPS.index(last) + 1]}
