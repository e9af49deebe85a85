"""``lab demo``: the main job, end to end, on the embedded default lab.

Every stage is the real command's core function, run against the lab exactly as an operator runs
it against a Proxmox host: the lab's vLLM CPU runtime and models (built once, cached), ``lab up``,
``provision`` (a container created through the PVE API double, reachable over SSH), ``launch``
(the bundled server preflights and execs real vLLM with the DFlash drafter), a first chat
request, ``bench`` (client latencies plus the server's spec-decode counters) and a live
``tune`` of ``num_speculative_tokens``: a few launches and benches, k* chosen from the measured
acceptance and step times, the server left running at k*.

The tuned playbook is kept in the lab's state folder (``lab-dflash.tuned.yaml``), never written
over the bundled one; later demos launch it, so a re-run finds the server unchanged and reports
the earlier k* (delete the file to tune again).
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
TUNED_PLAYBOOK = f"{DEMO_PLAYBOOK}.tuned.yaml"
TUNE_BUDGET = 3
FIRST_PROMPT = "Explain the theory of general relativity in detail."


@dataclass
class DemoReport:
    """What the demo did, stage by stage, and where the server runs."""

    inventory: str = ""
    endpoint: str = ""
    model: str = ""
    stages: list[tuple[str, str, float]] = field(default_factory=list)
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
    from dflashops.inventory.load import Inventory, load_inventory
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

    def runtime_and_models() -> str:
        runtime = ensure_runtime(progress=say)
        _models, built = ensure_lab_models(runtime, progress=say)
        return f"vLLM {runtime.vllm_version} (CPU); models {'built' if built else 'cached'}"

    stages.run("lab runtime and models", runtime_and_models)

    def up() -> str:
        status = lab_up(mounts=lab_mounts(), progress=say)
        return f"PVE API {status.api_url}"

    stages.run("lab up", up)
    report.inventory = str(paths.inventory)
    inventory: Inventory = load_inventory(paths.inventory)
    tuned = paths.state / TUNED_PLAYBOOK
    book_path = tuned if tuned.is_file() else resolve_playbook_path(DEMO_PLAYBOOK)
    playbook = load_playbook(book_path)
    report.model = playbook.served_name
    report.playbook = str(book_path)

    stages.run("provision", lambda: _provision(inventory, say))
    stages.run("launch", lambda: _launch(inventory, playbook, report, say))
    stages.run("first request", lambda: _first_request(report, playbook))
    stages.run("bench", lambda: _bench(inventory, playbook, report, paths.state, say))
    stages.run("tune", lambda: _tune(inventory, book_path, tuned, report, say))
    return report


def _provision(inventory: Any, say: Progress) -> str:
    from dflashops.proxmox.apply import provision

    result = provision(inventory, [DEMO_CONTAINER], progress=say)
    entry = result.container(DEMO_CONTAINER)
    if entry.error is not None:
        raise LabError(f"provision {DEMO_CONTAINER}: {entry.error}")
    return f"{DEMO_CONTAINER}: {entry.action}"


def _launch(inventory: Any, playbook: Any, report: DemoReport, say: Progress) -> str:
    from dflashops.launch.core import launch

    result = launch(inventory, DEMO_CONTAINER, playbook, progress=say)
    report.endpoint = str(result.endpoint)
    return f"{result.action}: {result.endpoint}"


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


def _bench(inventory: Any, playbook: Any, report: DemoReport, state: Path, say: Progress) -> str:
    from dflashops.bench.container import bench_container
    from dflashops.bench.settings import BenchSettings

    settings = BenchSettings.from_playbook(playbook)
    result = bench_container(inventory, DEMO_CONTAINER, playbook, settings, progress=say)
    out = state / "demo-bench.json"
    result.save(out)
    report.bench_file = str(out)
    level = result.levels[0]
    report.bench = {
        "output_throughput": level.output_throughput,
        "median_tpot_ms": level.median_tpot_ms,
        "spec_decode_acceptance_length": level.spec_decode_acceptance_length,
        "per_position_acceptance": level.spec_decode_per_position_acceptance_rates,
    }
    return f"{level.output_throughput:.1f} tok/s at concurrency {level.max_concurrency}"


def _tune(inventory: Any, book_path: Path, tuned: Path, report: DemoReport, say: Progress) -> str:
    """Tune k live on a copy of the playbook; the copy becomes ``tuned`` once k* is verified."""
    from dflashops.playbook.load import load_playbook
    from dflashops.tune.live import live_tune
    from dflashops.tune.request import LiveTuneRequest

    if book_path == tuned:
        k = load_playbook(tuned).server.num_speculative_tokens
        report.tune = {"best_k": k, "playbook": str(tuned), "tuned_earlier": True}
        return f"k*={k}, tuned earlier ({tuned}; delete it to tune again)"
    draft = tuned.with_name(f".{tuned.name}.tuning")
    draft.write_text(book_path.read_text(encoding="utf-8"), encoding="utf-8")
    workdir = tuned.parent / "demo-tune"
    workdir.mkdir(parents=True, exist_ok=True)
    request = LiveTuneRequest(
        container=DEMO_CONTAINER, playbook=str(draft), budget=TUNE_BUDGET, probe_dir=workdir
    )
    result = live_tune(inventory, request, say=say)
    draft.replace(tuned)  # only a verified k* is kept: a failed tune leaves no tuned playbook
    outcome = result.outcome
    saved = result.report.save(workdir / "tune-verify.json")
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
