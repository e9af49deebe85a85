"""``lab demo``: the main job, end to end, on the embedded default lab, built on ``up``.

The lab's vLLM CPU runtime and models (built once, cached; the DFlash drafter trained through
``drafter train``'s stages), ``lab up``, then the incident this tool grew from, replayed by
three runs of ``up`` (each step the real command's core call, against the lab exactly as an
operator runs it against a Proxmox host) over two pairs, the lab playbook on ``lab-ct1`` and
``lab-ct2``, run in parallel:

0. ``up`` (stopping after ``provision``) creates both containers, each on its own PVE node
   (``lab-ct1`` on ``lab``, ``lab-ct2`` on ``lab2``), so in parallel;
1. the lab playbook points at a copy of the trained drafter whose config was guessed by hand
   (:mod:`dflashops.lab.incident`), staged in ``lab-ct1`` only: ``up``'s drafter step refuses
   the guessed config, naming the keys. ``lab-ct2`` (nothing staged there) fails at the same
   step on purpose, before any launch: this 2-core machine runs one vLLM server at a time;
2. ``up --force`` (stopping after ``bench``) serves the guessed config anyway on ``lab-ct1``;
   a smoke request, then ``bench`` measures the collapse;
3. ``up --fix-drafter`` pushes the reference's certain keys (as ``drafter push``), launches
   again, smoke-tests, benches acceptance back up, tunes ``num_speculative_tokens`` live (k*
   from measured acceptance and step times; the server stays there) and writes the run folder.
   ``lab-ct2`` resumes at its failed step and fails there again; its provision is not redone.

Run records and run folders live under ``<lab state>/up`` (``DFLASHOPS_UP_STATE`` points
``dflashops up`` there to continue by hand). A later demo stages the guessed config again, so
the replay starts from the incident every time; ``up`` then reuses the k* it measured for the
same drafter files and playbook instead of tuning again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.lab.errors import LabError

Progress = Callable[[str], None]
# (pair, step, message): one event of one pair in an up run (up.runner's); pairs run in parallel
PairProgress = Callable[[str, str, str], None]
DEMO_CONTAINER = "lab-ct1"
SECOND_CONTAINER = "lab-ct2"  # the second pair: fails on purpose before its launch
DEMO_PLAYBOOK = "lab-dflash"
INCIDENT_PLAYBOOK = f"{DEMO_PLAYBOOK}.incident.yaml"
UP_STATE = "up"  # under the lab's state folder


@dataclass
class DemoReport:
    """What the demo did, run by run and step by step, and where the server runs."""

    inventory: str = ""
    up_state: str = ""
    endpoint: str = ""
    model: str = ""
    # one row per setup stage and per step an up run ran: run, container, step, result, seconds
    stages: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)  # each run's pair outcomes
    refused: str = ""
    refused_keys: list[str] = field(default_factory=list)
    pushed_keys: list[str] = field(default_factory=list)
    second_pair: str = ""  # why lab-ct2 stopped
    # "guessed", "corrected", "tuned" -> k, tok/s, mean acceptance length, per-position rates
    acceptance: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_reply: str = ""
    first_usage: dict[str, Any] = field(default_factory=dict)
    spec_decode: dict[str, Any] = field(default_factory=dict)
    bench_file: str = ""
    bench: dict[str, Any] = field(default_factory=dict)
    playbook: str = ""  # the playbook the server ends on (the tuned copy once tuned)
    playbook_file: str = ""  # the incident playbook up ran
    tune: dict[str, Any] = field(default_factory=dict)
    run_folder: str = ""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def stage(self, run: str, container: str, step: str, result: str, seconds: float) -> None:
        self.stages.append(
            {
                "run": run,
                "container": container,
                "step": step,
                "result": result,
                "seconds": round(seconds, 1),
            }
        )


def run_demo(
    progress: Progress | None = None, *, pair_progress: PairProgress | None = None
) -> DemoReport:
    """Run the setup and the three ``up`` runs; a stage that goes wrong raises with what it
    knows (the report so far is lost; the run records under the lab state are not).

    ``progress`` hears each stage and each up run as it starts; ``pair_progress`` what each
    pair does within an up run (without it, ``progress`` hears that too)."""
    from dflashops.inventory.load import load_inventory
    from dflashops.lab import incident
    from dflashops.lab.control import lab_up
    from dflashops.lab.models.ensure import ensure_lab_models
    from dflashops.lab.mounts import lab_mounts
    from dflashops.lab.paths import lab_paths
    from dflashops.lab.runtime import ensure_runtime
    from dflashops.playbook.load import load_playbook, resolve_playbook_path

    say = progress or (lambda _m: None)
    report = DemoReport()
    paths = lab_paths()

    def setup(name: str, fn: Callable[[], str]) -> None:
        say(name)
        started = time.monotonic()
        result = fn()
        report.stage("setup", "", name, result, time.monotonic() - started)

    def runtime_and_models() -> str:
        runtime = ensure_runtime(progress=say)
        _models, built = ensure_lab_models(runtime, progress=say)
        return f"vLLM {runtime.vllm_version} (CPU); models {'built' if built else 'cached'}"

    setup("lab runtime and models", runtime_and_models)
    setup("lab up", lambda: f"PVE API {lab_up(mounts=lab_mounts(), progress=say).api_url}")
    report.inventory = str(paths.inventory)
    inventory = load_inventory(paths.inventory)
    book_path = paths.state / INCIDENT_PLAYBOOK
    incident.incident_playbook(resolve_playbook_path(DEMO_PLAYBOOK), book_path)
    report.model = load_playbook(book_path).served_name
    report.playbook = report.playbook_file = str(book_path)
    report.up_state = str(paths.state / UP_STATE)
    runs = _UpRuns(inventory, book_path, Path(report.up_state), report, say, pair_say=pair_progress)
    runs.provision()  # both containers, before the incident is staged in one of them
    setup(
        "stage the incident",
        lambda: (
            f"{incident.GUESSED} copied to "
            f"{incident.stage_guessed_drafter(inventory, DEMO_CONTAINER)} in {DEMO_CONTAINER}"
        ),
    )
    runs.guessed()
    runs.forced()
    runs.fixed()
    return report


class _UpRuns:
    """The demo's runs of ``up`` and what each one must show."""

    def __init__(
        self,
        inventory: Any,
        book: Path,
        state: Path,
        report: DemoReport,
        say: Progress,
        *,
        pair_say: PairProgress | None,
    ) -> None:
        self.inventory, self.book, self.state = inventory, book, state
        self.report, self.say = report, say
        self.pair_say = pair_say or (
            lambda pair, step, message: say(f"{pair} [{step}] {message}" if step else message)
        )

    def _up(
        self, label: str, containers: tuple[str, ...], until: str | None = None, **options: Any
    ) -> Any:
        from dflashops.up.request import UpRequest
        from dflashops.up.runner import UpParts, run_up
        from dflashops.up.steps import steps_until

        request = UpRequest(
            playbooks=(self.book,), containers=containers, state_dir=self.state, **options
        )
        # the demo's runs that stop early (after provision, after bench) run a shorter table
        parts = UpParts(steps=steps_until(until)) if until else UpParts()

        self.say(f"up ({label}) on {', '.join(containers)}")
        result = run_up(self.inventory, request, on_event=self.pair_say, parts=parts)
        if result.interrupted:
            raise LabError("interrupted", hint="`dflashops lab demo` again replays the incident")
        for pair in result.pairs:
            self.report.pairs.append({"run": label, **_brief(pair)})
            record = _record(pair)
            for step in pair.ran:
                done = record.steps[step]
                self.report.stage(
                    label, pair.container, step, done.error or done.summary, done.seconds or 0.0
                )
        return result

    def provision(self) -> None:
        """Run 0: both pairs up to their provision (in parallel: one PVE node each)."""
        result = self._up("0 provision", (DEMO_CONTAINER, SECOND_CONTAINER), until="provision")
        for pair in result.pairs:
            if pair.outcome not in ("stopped", "unchanged"):
                raise LabError(f"provision: {pair.line()}")

    def guessed(self) -> None:
        """Run 1: the drafter step refuses the guessed config; lab-ct2 stops there on purpose."""
        result = self._up("1 guessed config", (DEMO_CONTAINER, SECOND_CONTAINER))
        first, second = result.pair(DEMO_CONTAINER), result.pair(SECOND_CONTAINER)
        if first.outcome != "failed" or first.last_step != "drafter":
            raise LabError(
                f"up served the guessed drafter config instead of refusing it: {first.line()}"
            )
        drafter = _record(first).steps["drafter"]
        self.report.refused = drafter.error or ""
        self.report.refused_keys = _finding_keys(drafter.outputs.get("findings") or [])
        self._second(second)

    def _second(self, second: Any) -> None:
        if second.outcome != "failed" or second.last_step != "drafter":
            raise LabError(f"{SECOND_CONTAINER} was to stop before its launch: {second.line()}")
        self.report.second_pair = second.error or ""

    def forced(self) -> None:
        """Run 2: ``--force`` serves the guessed config; ``bench`` measures the collapse."""
        result = self._up("2 --force", (DEMO_CONTAINER,), force=True, until="bench")
        pair = result.pair(DEMO_CONTAINER)
        if pair.outcome != "stopped":
            raise LabError(f"up --force: {pair.line()}")
        self.report.acceptance["guessed"] = _numbers(_record(pair).steps["bench"].outputs)

    def fixed(self) -> None:
        """Run 3: ``--fix-drafter`` pushes the keys; the rest of the loop runs to the end."""
        result = self._up("3 --fix-drafter", (DEMO_CONTAINER, SECOND_CONTAINER), fix_drafter=True)
        pair = result.pair(DEMO_CONTAINER)
        if pair.outcome != "done":
            raise LabError(f"up --fix-drafter: {pair.line()}")
        self._second(result.pair(SECOND_CONTAINER))
        steps = _record(pair).steps
        report = self.report
        report.pushed_keys = list(steps["drafter"].outputs.get("pushed_keys") or [])
        report.endpoint = str(steps["launch"].outputs["endpoint"])
        smoke = steps["smoke"].outputs
        report.first_reply = str(smoke.get("reply", ""))
        report.first_usage = dict(smoke.get("usage") or {})
        report.spec_decode = dict(smoke.get("spec_decode") or {})
        bench = steps["bench"].outputs
        report.acceptance["corrected"] = _numbers(bench)
        report.bench_file = str(bench["file"])
        report.bench = _numbers(bench)
        tune = dict(steps["tune"].outputs)
        report.tune = {**tune, "tuned_earlier": bool(tune.get("reused"))}
        report.acceptance["tuned"] = _numbers(tune)
        report.playbook = str(tune.get("playbook", report.playbook))
        report.run_folder = str(self.state / pair.pair)


def _record(pair: Any) -> Any:
    if pair.record is None:
        raise LabError(f"up kept no record for {pair.pair}: {pair.line()}")
    return pair.record


def _brief(pair: Any) -> dict[str, Any]:
    return {
        "pair": pair.pair,
        "container": pair.container,
        "outcome": pair.outcome,
        "last_step": pair.last_step,
        "line": pair.line(),
    }


def _numbers(outputs: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "k",
        "output_throughput",
        "median_tpot_ms",
        "spec_decode_acceptance_length",
        "per_position_acceptance",
    )
    return {key: outputs.get(key) for key in keys}


def _finding_keys(findings: list[str]) -> list[str]:
    """The keys of ``error: KEY: expected …`` finding lines, in order."""
    keys = []
    for line in findings:
        severity, _, rest = line.partition(": ")
        if severity == "error":
            keys.append(rest.split(": expected", 1)[0])
    return keys
