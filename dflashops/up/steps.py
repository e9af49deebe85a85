"""The steps of ``up``, each a call of the core function the single command calls.

A step returns ``(summary, outputs)`` or raises; what it needs from an earlier step (the
endpoint, the bench file) it reads from the pair's record, so a step that was skipped because it
had succeeded with the same inputs still feeds the steps after it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.bench.container import bench_container
from dflashops.bench.models import BenchReport
from dflashops.bench.settings import BenchSettings
from dflashops.deployment.access import connect
from dflashops.drafter.push import push_drafter_config
from dflashops.inventory.load import Inventory
from dflashops.launch.core import launch
from dflashops.launch.validation import validate
from dflashops.playbook.models import Playbook
from dflashops.progress import Say
from dflashops.proxmox.apply import provision
from dflashops.tune.live import live_tune, playbook_at_k, set_num_speculative_tokens
from dflashops.tune.request import LiveTuneRequest
from dflashops.up.inputs import DrafterFiles, tune_asked, tune_key
from dflashops.up.record import PairRecord, UpError
from dflashops.up.smoke import smoke_request
from dflashops.up.summary import write_run_report

Outcome = tuple[str, dict[str, Any]]
BENCH_FILE = "bench.json"
TUNE_FILE = "tune.json"
TUNED_PLAYBOOK = "playbook.tuned.yaml"


@dataclass
class PairWork:
    """One pair's inputs and shared locks, handed to every step."""

    inventory: Inventory
    playbook: Playbook
    playbook_path: Path
    container: str
    record: PairRecord
    run_dir: Path
    say: Say
    fix_drafter: bool = False
    force: bool = False
    drafter_files: DrafterFiles = field(default_factory=lambda: DrafterFiles(None, None))
    # PVE work on one node is serialised (vmid allocation, template download)
    node_lock: threading.Lock = field(default_factory=threading.Lock)
    # matplotlib's pyplot state is process-wide: one pair plots at a time
    plot_lock: threading.Lock = field(default_factory=threading.Lock)
    forced: bool = False  # this run's drafter step went on over errors

    def output(self, step: str, key: str) -> Any:
        done = self.record.step(step)
        value = done.outputs.get(key) if done else None
        if value is None:
            raise UpError(f"{self.record.pair}: no {key} recorded by the {step} step")
        return value


def step_provision(work: PairWork) -> Outcome:
    with work.node_lock:
        result = provision(work.inventory, [work.container], progress=work.say)
    entry = result.container(work.container)
    if not entry.ok:
        raise UpError(f"provision: {entry.error or '; '.join(entry.issues)}")
    return f"{entry.action}", {"action": entry.action, "vmid": entry.vmid}


def step_drafter(work: PairWork) -> Outcome:
    """``drafter check`` as launch runs it; ``--fix-drafter`` pushes the certain keys first."""
    book = work.playbook
    outputs: dict[str, Any] = {}
    if book.drafter.method != "dflash" or book.drafter.model is None:
        return f"method {book.drafter.method}: no DFlash drafter config to check", outputs
    if work.fix_drafter:
        pushed = push_drafter_config(work.inventory, work.container, book, progress=work.say)
        outputs["pushed_keys"] = [change.key for change in pushed.changes]
    work.say("checking the drafter")
    with connect(work.inventory, work.container) as conn:
        validation, _target = validate(conn, book)
    outputs["status"] = validation.status
    outputs["findings"] = validation.lines()
    pushed_note = ""
    if "pushed_keys" in outputs:
        pushed_note = f"pushed {', '.join(outputs['pushed_keys']) or 'nothing'}; "
    if validation.failed:
        errors = validation.lines("error")
        if not work.force:
            raise StepRefused(
                f"drafter check found {len(errors)} error(s): " + "; ".join(errors[:3]),
                outputs=outputs,
                hint="--fix-drafter pushes the registry's certain keys; --force goes on anyway",
            )
        work.forced = True
        return f"{pushed_note}--force over {len(errors)} error(s)", outputs
    return f"{pushed_note}{validation.status}", outputs


class StepRefused(UpError):
    """A step stopped the pair on purpose; ``outputs`` are recorded with the failure."""

    def __init__(self, message: str, *, outputs: dict[str, Any], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.outputs = outputs


def step_launch(work: PairWork) -> Outcome:
    report = launch(
        work.inventory, work.container, work.playbook, force=work.force, progress=work.say
    )
    outputs = {
        "action": report.action,
        "endpoint": report.endpoint,
        "forced": report.forced,
        "findings": report.drafter_findings,
        "k": work.playbook.server.num_speculative_tokens,
    }
    return f"{report.action}: {report.endpoint}", outputs


def step_smoke(work: PairWork) -> Outcome:
    work.say("one chat request")
    out = smoke_request(str(work.output("launch", "endpoint")), work.playbook)
    tokens = out["usage"].get("completion_tokens", "?")
    drafts = (out.get("spec_decode") or {}).get("num_drafts")
    return f"{tokens} tokens" + (f", {drafts} drafts" if drafts else ""), out


def bench_numbers(k: int | None, report: BenchReport) -> dict[str, Any]:
    """What the end table and the demo show from a bench: its first level (concurrency 1)."""
    level = report.levels[0]
    return {
        "k": k,
        "output_throughput": level.output_throughput,
        "median_tpot_ms": level.median_tpot_ms,
        "spec_decode_acceptance_length": level.spec_decode_acceptance_length,
        "per_position_acceptance": level.spec_decode_per_position_acceptance_rates,
    }


def step_bench(work: PairWork) -> Outcome:
    settings = BenchSettings.from_playbook(work.playbook)
    report = bench_container(
        work.inventory, work.container, work.playbook, settings, progress=work.say
    )
    path = report.save(work.run_dir / BENCH_FILE)
    numbers = bench_numbers(work.playbook.server.num_speculative_tokens, report)
    return _numbers_line(numbers), {**numbers, "file": str(path)}


def _numbers_line(numbers: dict[str, Any]) -> str:
    length = numbers.get("spec_decode_acceptance_length")
    shown = "?" if length is None else f"{length:.2f}"
    return f"{numbers['output_throughput']:.1f} tok/s, acceptance length {shown}"


def step_tune(work: PairWork) -> Outcome:
    """Tune k live (budget and range from the playbook); a k* found earlier for the same
    drafter files and playbook is launched again instead of tuned again."""
    book = work.playbook
    if not tune_asked(book):
        return "not asked (the playbook has no tune section)", {"asked": False}
    drafter = work.record.step("drafter")
    if work.forced or (drafter is not None and drafter.forced):
        return "not run: the drafter went on over errors (--force)", {"asked": True}
    key = tune_key(book, work.drafter_files)
    earlier = work.record.tuned.get(key)
    if earlier is not None:
        k = int(earlier["best_k"])
        work.say(f"k*={k} tuned earlier for this drafter: launching it")
        launch(work.inventory, work.container, playbook_at_k(book, k), progress=work.say)
        return f"k*={k}, tuned earlier for this drafter and playbook", {**earlier, "reused": True}
    request = LiveTuneRequest(
        container=work.container,
        playbook=str(work.playbook_path),
        write_playbook=False,  # the operator's playbook stays as written; the copy gets k*
        probe_dir=work.run_dir / "tune",
    )
    result = live_tune(work.inventory, request, say=work.say)
    outcome = result.outcome
    saved = result.report.save(work.run_dir / TUNE_FILE)
    tuned = work.run_dir / TUNED_PLAYBOOK
    text = work.playbook_path.read_text(encoding="utf-8")
    tuned.write_text(set_num_speculative_tokens(text, outcome.best_k), encoding="utf-8")
    outputs = {
        **bench_numbers(outcome.best_k, result.report),
        "best_k": outcome.best_k,
        "start_k": outcome.start_k,
        "launches": outcome.launches,
        "predicted_tok_s": outcome.predicted_tok_s,
        "measured_tok_s": outcome.measured_tok_s,
        "start_tok_s": outcome.start_tok_s,
        "gain": outcome.gain,
        "report": str(saved),
        "playbook": str(tuned),
        "reused": False,
    }
    work.record.tuned[key] = outputs
    measured = outcome.measured_tok_s
    if outcome.best_k == outcome.start_k:  # a gain over itself is the benches' noise
        gain = f", the starting k={outcome.start_k} kept"
    elif outcome.gain is None:
        gain = ""
    else:
        gain = f", {outcome.gain:+.0%} over k={outcome.start_k}"
    shown = "?" if measured is None else f"{measured:.1f}"
    line = f"k*={outcome.best_k}: {shown} tok/s measured{gain} ({len(outcome.launches)} launches)"
    return line, outputs


def step_report(work: PairWork) -> Outcome:
    with work.plot_lock:
        files = write_run_report(work.record, work.run_dir)
    return f"{len(files)} files in {work.run_dir}", {"files": [str(f) for f in files]}


STEP_FUNCTIONS: dict[str, Callable[[PairWork], Outcome]] = {
    "provision": step_provision,
    "drafter": step_drafter,
    "launch": step_launch,
    "smoke": step_smoke,
    "bench": step_bench,
    "tune": step_tune,
    "report": step_report,
}
