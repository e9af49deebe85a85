"""``up``'s tune step for a playbook with ``tune.load``: k per batch size (``tune --load``),
the tuned copy of the playbook in the run folder, and the reuse of an earlier result.

What an earlier run tuned for the same drafter files and playbook (:func:`~.inputs.tune_key`) is
launched again, schedule and all, instead of tuned again, as the concurrency-1 k* is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dflashops.deployment.access import ContainerAccess
from dflashops.inventory.load import Inventory
from dflashops.launch.core import launch
from dflashops.playbook.models import Playbook
from dflashops.progress import Say
from dflashops.tune.live_load import live_load_tune, served_playbook
from dflashops.tune.request import LiveTuneRequest
from dflashops.up.outputs import TuneOutput


def tune_for_load(
    inventory: Inventory,
    container: str,
    playbook_path: Path,
    run_dir: Path,
    *,
    access: ContainerAccess,
    say: Say,
    files: tuple[str, str],
) -> TuneOutput:
    """Run ``tune --load`` on the container; the operator's playbook stays as written and
    ``files`` (the result JSON, the tuned playbook copy) in ``run_dir`` get the outcome."""
    request = LiveTuneRequest(
        container=container,
        playbook=str(playbook_path),
        write_playbook=False,
        probe_dir=run_dir / "tune",
    )
    result = live_load_tune(inventory, request, say=say, access=access)
    outcome = result.outcome
    saved = result.report.save(run_dir / files[0])
    tuned = run_dir / files[1]
    tuned.write_text(result.tuned_text, encoding="utf-8")
    verdict = outcome.verdict
    start_k = _start_k(outcome.launches)
    return TuneOutput(
        # "off" winning keeps the playbook's k (the verdict says to turn speculation off)
        best_k=outcome.kept_k or start_k,
        start_k=start_k,
        launches=[_k_of(served) for served in outcome.launches],
        load_levels=list(outcome.result.k_by_level),
        k_by_level={str(level): k for level, k in outcome.result.k_by_level.items()},
        schedule=outcome.kept_schedule,
        decision=outcome.decision.kind,
        verdict=outcome.sentence,
        schedule_kept=verdict.accepted if verdict is not None else None,
        report=str(saved),
        playbook=str(tuned),
    )


def relaunch_tuned(
    inventory: Inventory,
    container: str,
    book: Playbook,
    earlier: TuneOutput,
    *,
    access: ContainerAccess,
    say: Say,
) -> str:
    """Launch what an earlier load tune kept (its schedule, else its k); the step's line."""
    k = earlier.best_k or book.server.num_speculative_tokens or 1
    served: int | list[list[int]] = earlier.schedule if earlier.schedule else k
    what = f"the schedule {earlier.schedule}" if earlier.schedule else f"k={k}"
    say(f"{what} tuned earlier for this drafter under load: launching it")
    launch(inventory, container, served_playbook(book, served), progress=say, access=access)
    return f"{what}, tuned earlier for this drafter and playbook (levels {earlier.load_levels})"


def load_line(output: TuneOutput) -> str:
    levels = ", ".join(f"c={level}: k={k}" for level, k in (output.k_by_level or {}).items())
    kept = f"schedule {output.schedule}" if output.schedule else f"k={output.best_k}"
    return f"{kept} ({levels}; {len(output.launches)} launches)"


def _k_of(served: Any) -> int:
    """A launch as the record keeps it: its k (a schedule: its largest)."""
    return served if isinstance(served, int) else max(entry[2] for entry in served)


def _start_k(launches: list[Any]) -> int | None:
    return launches[0] if launches and isinstance(launches[0], int) else None
