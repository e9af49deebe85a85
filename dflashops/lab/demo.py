"""``lab demo``: the main job, end to end, on the embedded default lab, replaying the incident.

Every stage is the real command's core function, run against the lab exactly as an operator runs
it against a Proxmox host: the lab's vLLM CPU runtime and models (built once, cached; the DFlash
drafter trained through ``drafter train``'s stages), ``lab up``, ``provision``, then the incident
this tool grew from, on DFlash:

1. the lab playbook points at a copy of the trained drafter whose config was guessed by hand
   (:mod:`dflashops.lab.incident`): ``launch`` refuses it, naming the keys;
2. ``launch --force`` serves it anyway and ``bench`` measures the collapse;
3. ``drafter push`` writes the reference's certain keys; ``launch`` again; ``bench`` measures
   acceptance back up; a chat request shows the counters;
4. a live ``tune`` of ``num_speculative_tokens`` picks k* from measured acceptance and step
   times and leaves the server there.

The tuned playbook is kept in the lab's state folder (``lab-dflash.tuned.yaml``), never written
over the bundled one, with the digest of the drafter it was tuned for in its first line; a later
demo reuses it only for that same drafter (delete it to tune again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.errors import LabError

Progress = Callable[[str], None]
DEMO_CONTAINER = "lab-ct1"
DEMO_PLAYBOOK = "lab-dflash"
INCIDENT_PLAYBOOK = f"{DEMO_PLAYBOOK}.incident.yaml"
TUNED_PLAYBOOK = f"{DEMO_PLAYBOOK}.tuned.yaml"
TUNE_BUDGET = 3
FIRST_PROMPT = "Explain the theory of general relativity in detail."
TUNED_FOR = "# tuned for the lab drafter "


@dataclass
class DemoReport:
    """What the demo did, stage by stage, and where the server runs."""

    inventory: str = ""
    endpoint: str = ""
    model: str = ""
    stages: list[tuple[str, str, float]] = field(default_factory=list)
    refused: str = ""
    refused_keys: list[str] = field(default_factory=list)
    pushed_keys: list[str] = field(default_factory=list)
    # "guessed", "corrected", "tuned" -> k, tok/s, mean acceptance length, per-position rates
    acceptance: dict[str, dict[str, Any]] = field(default_factory=dict)
    first_reply: str = ""
    first_usage: dict[str, Any] = field(default_factory=dict)
    spec_decode: dict[str, Any] = field(default_factory=dict)
    bench_file: str = ""
    bench: dict[str, Any] = field(default_factory=dict)
    playbook: str = ""
    tune: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["stages"] = [
            {"stage": name, "result": result, "seconds": round(secs, 1)}
            for name, result, secs in self.stages
        ]
        return data


class _Stages:
    def __init__(self, report: DemoReport, progress: Progress) -> None:
        self.report = report
        self.say = progress

    def run(self, name: str, fn: Callable[[], str]) -> None:
        self.say(name)
        started = time.monotonic()
        result = fn()
        self.report.stages.append((name, result, time.monotonic() - started))


def run_demo(progress: Progress | None = None) -> DemoReport:
    """Run every stage; a failing stage raises with what it knows (the report so far is lost)."""
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
    stages = _Stages(report, say)
    paths = lab_paths()
    drafter_digest = ""

    def runtime_and_models() -> str:
        nonlocal drafter_digest
        runtime = ensure_runtime(progress=say)
        models, built = ensure_lab_models(runtime, progress=say)
        drafter_digest = _drafter_digest(models)
        return f"vLLM {runtime.vllm_version} (CPU); models {'built' if built else 'cached'}"

    stages.run("lab runtime and models", runtime_and_models)
    stages.run("lab up", lambda: f"PVE API {lab_up(mounts=lab_mounts(), progress=say).api_url}")
    report.inventory = str(paths.inventory)
    inventory = load_inventory(paths.inventory)
    stages.run("provision", lambda: _provision(inventory, say))

    book_path = paths.state / INCIDENT_PLAYBOOK

    def stage_incident() -> str:
        incident.incident_playbook(resolve_playbook_path(DEMO_PLAYBOOK), book_path)
        staged = incident.stage_guessed_drafter(inventory, DEMO_CONTAINER)
        return f"{incident.GUESSED} copied to {staged}"

    stages.run("stage the incident", stage_incident)
    playbook = load_playbook(book_path)
    report.model = playbook.served_name
    report.playbook = str(book_path)
    steps = _IncidentSteps(inventory, playbook, report, paths.state, say)
    stages.run("launch (guessed config)", steps.refused_launch)
    stages.run("launch --force", lambda: steps.launch(force=True))
    stages.run("bench (guessed config)", lambda: steps.bench("guessed"))
    stages.run("drafter push", steps.push)
    stages.run("launch (corrected)", lambda: steps.launch(force=False))
    stages.run("first request", lambda: _first_request(report, playbook))
    stages.run("bench (corrected)", lambda: steps.bench("corrected"))
    tuned = paths.state / TUNED_PLAYBOOK
    stages.run("tune", lambda: _tune(steps, book_path, tuned, drafter_digest))
    return report


def _drafter_digest(models: Any) -> str:
    """The sha256 of the lab drafter's weights, from the build's manifest."""
    files = (models.read_manifest() or {}).get("files") or {}
    digest = files.get(f"{models.dflash.name}/model.safetensors")
    if not digest:
        raise LabError(f"the lab models in {models.root} list no DFlash drafter weights")
    return str(digest)


def _provision(inventory: Any, say: Progress) -> str:
    from dflashops.proxmox.apply import provision

    result = provision(inventory, [DEMO_CONTAINER], progress=say)
    entry = result.container(DEMO_CONTAINER)
    if entry.error is not None:
        raise LabError(f"provision {DEMO_CONTAINER}: {entry.error}")
    return f"{DEMO_CONTAINER}: {entry.action}"


class _IncidentSteps:
    """The incident replay's launches, benches and push, on one container and playbook."""

    def __init__(
        self, inventory: Any, playbook: Any, report: DemoReport, state: Path, say: Progress
    ) -> None:
        self.inventory, self.playbook, self.report = inventory, playbook, report
        self.state, self.say = state, say

    def refused_launch(self) -> str:
        from dflashops.launch.core import launch
        from dflashops.launch.report import LaunchRefused

        try:
            launch(self.inventory, DEMO_CONTAINER, self.playbook, progress=self.say)
        except LaunchRefused as exc:
            self.report.refused = exc.one_line()
        else:
            raise LabError("launch served the guessed drafter config instead of refusing it")
        count = self.report.refused.split(" error(s)", 1)[0].rsplit(" ", 1)[-1]
        return f"refused: {count} drafter check error(s), named below"

    def launch(self, *, force: bool) -> str:
        from dflashops.launch.core import launch

        result = launch(
            self.inventory, DEMO_CONTAINER, self.playbook, force=force, progress=self.say
        )
        if force:
            self.report.refused_keys = _finding_keys(result.drafter_findings)
        self.report.endpoint = str(result.endpoint)
        return f"{result.action}: {result.endpoint}"

    def bench(self, label: str) -> str:
        from dflashops.bench.container import bench_container
        from dflashops.bench.settings import BenchSettings

        settings = BenchSettings.from_playbook(self.playbook)
        result = bench_container(
            self.inventory, DEMO_CONTAINER, self.playbook, settings, progress=self.say
        )
        out = self.state / f"demo-bench-{label}.json"
        result.save(out)
        level = result.levels[0]
        self.report.acceptance[label] = _acceptance(self.playbook, level)
        if label == "corrected":
            self.report.bench_file = str(out)
            self.report.bench = dict(self.report.acceptance[label])
        return (
            f"{level.output_throughput:.1f} tok/s, acceptance length "
            f"{_fmt(level.spec_decode_acceptance_length)}"
        )

    def push(self) -> str:
        from dflashops.drafter.push import push_drafter_config

        result = push_drafter_config(
            self.inventory, DEMO_CONTAINER, self.playbook, progress=self.say
        )
        errors = [f for f in result.findings if f.startswith("error")]
        if errors:
            raise LabError(f"drafter push left errors: {'; '.join(errors)}")
        self.report.pushed_keys = [change.key for change in result.changes]
        return f"wrote {', '.join(self.report.pushed_keys) or 'nothing'}"


def _finding_keys(findings: list[str]) -> list[str]:
    """The keys of ``error: KEY: expected …`` finding lines, in order."""
    keys = []
    for line in findings:
        severity, _, rest = line.partition(": ")
        if severity == "error":
            keys.append(rest.split(": expected", 1)[0])
    return keys


def _acceptance(playbook: Any, level: Any) -> dict[str, Any]:
    return {
        "k": playbook.server.num_speculative_tokens,
        "output_throughput": level.output_throughput,
        "median_tpot_ms": level.median_tpot_ms,
        "spec_decode_acceptance_length": level.spec_decode_acceptance_length,
        "per_position_acceptance": level.spec_decode_per_position_acceptance_rates,
    }


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _first_request(report: DemoReport, playbook: Any) -> str:
    import httpx

    base = report.endpoint.rstrip("/")
    if not base.endswith("/v1"):
        base += "/v1"
    body = {
        "model": playbook.served_name,
        "messages": [{"role": "user", "content": FIRST_PROMPT}],
        "max_tokens": 48,
        "temperature": 0,
    }
    with httpx.Client(timeout=120) as client:
        reply = client.post(f"{base}/chat/completions", json=body)
        reply.raise_for_status()
        data = reply.json()
        metrics = client.get(f"{base.removesuffix('/v1')}/metrics").text
    report.first_reply = str(data["choices"][0]["message"]["content"])
    report.first_usage = dict(data.get("usage") or {})
    from dflashops.metrics.spec_decode import SpecDecodeCounters

    counters = SpecDecodeCounters.from_scrape(metrics)
    if not counters.spec_decode:
        raise LabError("the server exposes no vllm:spec_decode_* counters: speculation is off")
    report.spec_decode = {
        "num_drafts": counters.num_drafts,
        "draft_tokens": counters.num_draft_tokens,
        "accepted_tokens": counters.num_accepted_tokens,
    }
    return f"{report.first_usage.get('completion_tokens', '?')} tokens"


def tuned_for(path: Path) -> str | None:
    """The drafter digest a tuned playbook records in its first line, or None."""
    try:
        first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    except OSError:
        return None
    return first.removeprefix(TUNED_FOR).strip() if first.startswith(TUNED_FOR) else None


def _tune(steps: _IncidentSteps, book_path: Path, tuned: Path, digest: str) -> str:
    """Tune k live on a copy of the playbook; the copy becomes ``tuned`` once k* is verified.

    A tuned playbook from an earlier demo is launched again, but only when it was tuned for the
    same drafter weights: a k* measured on another drafter says nothing about this one."""
    from dflashops.bench.models import BenchReport
    from dflashops.launch.core import launch
    from dflashops.playbook.load import load_playbook
    from dflashops.tune.live import live_tune
    from dflashops.tune.request import LiveTuneRequest

    inventory, report, say = steps.inventory, steps.report, steps.say
    workdir = tuned.parent / "demo-tune"
    verify_file = workdir / "tune-verify.json"
    if tuned_for(tuned) == digest and verify_file.is_file():
        book = load_playbook(tuned)
        launch(inventory, DEMO_CONTAINER, book, progress=say)
        verify = BenchReport.load(verify_file)
        k = book.server.num_speculative_tokens
        report.acceptance["tuned"] = _acceptance(book, verify.levels[0])
        report.playbook = str(tuned)
        report.tune = {"best_k": k, "playbook": str(tuned), "tuned_earlier": True}
        return f"k*={k}, tuned earlier for this drafter ({tuned}; delete it to tune again)"
    draft = tuned.with_name(f".{tuned.name}.tuning")
    draft.write_text(
        f"{TUNED_FOR}{digest}\n" + book_path.read_text(encoding="utf-8"), encoding="utf-8"
    )
    workdir.mkdir(parents=True, exist_ok=True)
    request = LiveTuneRequest(
        container=DEMO_CONTAINER, playbook=str(draft), budget=TUNE_BUDGET, probe_dir=workdir
    )
    result = live_tune(inventory, request, say=say)
    draft.replace(tuned)  # only a verified k* is kept: a failed tune leaves no tuned playbook
    outcome = result.outcome
    saved = result.report.save(verify_file)
    report.acceptance["tuned"] = _acceptance(load_playbook(tuned), result.report.levels[0])
    report.playbook = str(tuned)
    report.tune = {
        "best_k": outcome.best_k,
        "start_k": outcome.start_k,
        "launches": outcome.launches,
        "predicted_tok_s": outcome.predicted_tok_s,
        "measured_tok_s": outcome.measured_tok_s,
        "start_tok_s": outcome.start_tok_s,
        "gain": outcome.gain,
        "playbook": str(tuned),
        "report": str(saved),
        "tuned_earlier": False,
    }
    gain = "" if outcome.gain is None else f", {outcome.gain:+.0%} over k={outcome.start_k}"
    measured = outcome.measured_tok_s
    shown = "?" if measured is None else f"{measured:.1f}"
    return f"k*={outcome.best_k}: {shown} tok/s measured{gain} ({len(outcome.launches)} launches)"
