"""``gpu_load.py selfcheck``: the driver against a fake engine, here, without a GPU.

The fake serves what the driver asks (a k, 0, or a schedule) and "benches" it as one of the canned
machines of ``tests/unit/test_tune_load.py`` would: the GPU-like one (the H200's flat step costs
at batch 1, a compute ridge at 256 tokens a step, the acceptance the H200's k=15 server reported)
or the CPU-like one (every verified token costs work, so speculation stops paying at c=32). A
schedule runs each level at its scheduled k, less ``losses[level]`` (vllm#49548's shape: tok/s
collapsing past a threshold). Its reports are real ``BenchReport`` objects, so the driver's whole
path runs: the store, ``level_runs_from_report``, ``run_load_tune``, the static sweep, the
criterion and the summary, and a run cut by the deadline and resumed.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gpu_load_core as core

from dflashops.bench.models import BenchReport, LevelResult, ResolvedConfig, WorkloadInfo
from dflashops.tune.acceptance import AcceptanceCurve
from dflashops.tune.live_load import Served
from tests.unit.test_stepcost_gpu_numbers import H200_STEP_S
from tests.unit.test_tune_load import CPU_CURVE, GPU_CURVE, cpu_step, gpu_step

StepCost = Callable[[int, int], float]
MAX_TOKENS = 256


def gpu_like_step(batch: int, k: int) -> float:
    """``gpu_step`` at every k: between the H200's measured k (1, 2, 4, 8, 15) linear in k."""
    if k == 0 or k in H200_STEP_S:
        return gpu_step(batch, k)
    below = max(m for m in H200_STEP_S if m < k)
    above = min((m for m in H200_STEP_S if m > k), default=None)
    if above is None:  # past 15: the last measured slope
        return gpu_step(batch, 15) + (k - 15) * (gpu_step(batch, 15) - gpu_step(batch, 8)) / 7
    share = (k - below) / (above - below)
    return gpu_step(batch, below) * (1 - share) + gpu_step(batch, above) * share


class FakeEngine:
    """``serve(served) -> record`` as the device's, over a canned machine."""

    def __init__(
        self,
        step: StepCost,
        curve: AcceptanceCurve,
        *,
        losses: dict[int, float] | None = None,
        fail: frozenset[str] = frozenset(),
        levels: tuple[int, ...] = core.LEVELS,
        min_requests: int = core.MIN_REQUESTS,
    ) -> None:
        self.step, self.curve, self.losses, self.fail = step, curve, losses or {}, fail
        self.groups = core.level_groups(core.requests_per_level(levels, min_requests))
        self.served: list[str] = []

    def level(self, served: Served, level: int, requests: int) -> LevelResult:
        k = core.k_at(served, level)
        tokens = self.curve.tokens_per_step(k)
        step = self.step(level, k)
        loss = self.losses.get(level, 0.0) if isinstance(served, list) else 0.0
        tok_s = level * tokens / step * (1.0 - loss)
        output = requests * MAX_TOKENS
        drafts = round(output / tokens) if k else 0
        top = core.max_k(served)
        positions = [self.curve.rate(i) if i < k else 0.0 for i in range(top)]
        return LevelResult(
            max_concurrency=level,
            completed=requests,
            failed=0,
            duration=output / tok_s,
            total_input_tokens=128 * requests,
            total_output_tokens=output,
            request_throughput=requests * tok_s / output,
            output_throughput=tok_s,
            total_token_throughput=tok_s * (1 + 128 / MAX_TOKENS),
            median_tpot_ms=1000.0 * step / tokens / (1.0 - loss),
            spec_decode_acceptance_length=tokens if top else None,
            spec_decode_num_drafts=drafts if top else None,
            spec_decode_draft_tokens=drafts * k if top else None,
            spec_decode_accepted_tokens=round(drafts * (tokens - 1)) if top else None,
            spec_decode_per_position_acceptance_rates=positions if top else None,
        )

    def serve(self, served: Served) -> core.Record:
        key = core.served_key(served)
        self.served.append(key)
        if key in self.fail:
            return {"error": "server exited rc=1 (fake)", "start_s": 1.0}
        top = core.max_k(served)
        reports = [
            BenchReport(
                config=ResolvedConfig(
                    method="dflash" if top else "none", num_speculative_tokens=top
                ),
                workload=WorkloadInfo(
                    name="q8b",
                    num_prompts=16,
                    requests_per_level=n,
                    warmup_requests=1,
                    max_tokens=MAX_TOKENS,
                    temperature=0.0,
                    ignore_eos=True,
                ),
                levels=[self.level(served, level, n) for level in levels],
            ).model_dump(mode="json")
            for levels, n in self.groups
        ]
        return {"reports": reports, "start_s": 0.0, "bench_s": 0.0}


class FakeClock:
    """Launch-count deadlines: ``check_time`` refuses the launch past ``allowed``."""

    def __init__(self, allowed: int | None = None) -> None:
        self.allowed, self.launched = allowed, 0

    def check_time(self, served: Served) -> None:
        if self.allowed is not None and self.launched >= self.allowed:
            raise core.OutOfTime(served, 300.0, 100.0)
        self.launched += 1


def drive(
    engine: FakeEngine,
    *,
    current_k: int = 15,
    store: core.Store | None = None,
    clock: FakeClock | None = None,
    said: list[str] | None = None,
) -> core.Record:
    config = core.LoadBenchConfig(model="fake", current_k=current_k)
    bench = core.LoadBench(
        config,
        store if store is not None else core.Store(),
        engine.serve,
        (clock or FakeClock()).check_time,
        (said if said is not None else []).append,
    )
    return bench.run()


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def scenario_gpu_schedule_kept() -> str:
    engine = FakeEngine(gpu_like_step, GPU_CURVE)
    result = drive(engine)
    tune, crit = result["tune"], result["criterion"]
    check(result["complete"], "the run completes")
    check(tune is not None and tune["section"]["verdict"]["accepted"], "the schedule is kept")
    check(len(set(engine.served)) == len(engine.served), "no configuration is served twice")
    static = [key for key in engine.served if key.startswith("k")]
    check(engine.served[:3] == ["k15", "k0", "k1"], f"the tuner's first probes: {engine.served}")
    check(sum(key.startswith("schedule") for key in engine.served) == 1, "one verification")
    check({f"k{k}" for k in core.STATIC_KS} <= set(static), "every static k is measured")
    check(crit["met"], f"the schedule reaches 0.97 of the best static k: {crit['levels']}")
    check(crit["k0_first_win"] is None, "speculation pays at every level on the GPU")
    check(crit["served"] == tune["kept_schedule"], "the served configuration is the schedule")
    return f"GPU machine: served {engine.served}; kept {tune['kept_schedule']}"


def scenario_gpu_schedule_refused() -> str:
    # vllm#49548: tok/s collapses once the batch crosses the schedule's first threshold
    engine = FakeEngine(gpu_like_step, GPU_CURVE, losses={8: 0.45, 16: 0.6, 32: 0.6})
    result = drive(engine)
    tune, crit = result["tune"], result["criterion"]
    verdict = tune["section"]["verdict"]
    check(not verdict["accepted"], "the schedule is refused")
    check(tune["kept_schedule"] is None and crit["served"] == tune["kept_k"], "a single k kept")
    check(str(tune["sentence"]).startswith("schedule refused: at c="), "the sentence says why")
    rows = {row["level"]: row for row in crit["levels"]}
    check(rows[16]["schedule"]["ratio"] < 0.5, "the refused schedule's numbers are reported")
    text = core.summary_text(result)
    check("as verified (refused)" in text and "schedule refused" in text, "the summary says so")
    return f"vllm#49548 shape: {' '.join(str(tune['sentence']).split())[:110]}..."


def scenario_cpu_k0_wins() -> str:
    engine = FakeEngine(cpu_step, CPU_CURVE)
    result = drive(engine, current_k=8)
    crit = result["criterion"]
    check(crit["k0_first_win"] == 32, f"k = 0 wins from c=32: {crit['k0_wins_at']}")
    check(crit["tuner_stops_paying_at"] == 32, "the tuner's model agrees")
    return f"CPU machine: k=0 best from c={crit['k0_first_win']}; served {engine.served}"


def scenario_resumed_run_matches() -> str:
    whole = drive(FakeEngine(gpu_like_step, GPU_CURVE))
    store = core.Store()
    first = FakeEngine(gpu_like_step, GPU_CURVE)
    cut = drive(first, store=store, clock=FakeClock(allowed=3))
    check(not cut["complete"] and cut["incomplete"]["next"] not in (None, 15, 0, 1), "cut at 4")
    check("INCOMPLETE" in core.summary_text(cut), "the summary says to call again")
    calls = 0
    engines = []
    while True:  # later calls: two launches each
        calls += 1
        engine = FakeEngine(gpu_like_step, GPU_CURVE)
        engines.append(engine)
        result = drive(engine, store=store, clock=FakeClock(allowed=2))
        if result["complete"] or calls > 5:
            break
    served = first.served + [key for engine in engines for key in engine.served]
    check(result["complete"], "resumed calls finish the run")
    check(len(set(served)) == len(served), f"nothing is served twice across calls: {served}")
    check(sorted(served) == sorted(whole["records"]), "the same configurations as one run")
    check(result["tune"]["sentence"] == whole["tune"]["sentence"], "the same verdict")
    check(result["criterion"] == whole["criterion"], "the same criterion")
    return f"cut after 3 launches, finished in {calls} more calls with the same verdict"


def scenario_fresh_machine_resumes_from_the_returned_json() -> str:
    """A call killed after its fourth launch left only the snapshot written to $OUT; a fresh
    machine resumes from that file (``--resume-from``) and ends where one run ends."""
    whole = drive(FakeEngine(gpu_like_step, GPU_CURVE))
    snapshots: list[core.Record] = []
    config = core.LoadBenchConfig(model="fake")
    first = FakeEngine(gpu_like_step, GPU_CURVE)
    core.LoadBench(
        config,
        core.Store(),
        first.serve,
        FakeClock(allowed=4).check_time,
        lambda line: None,
        after_record=snapshots.append,
    ).run()
    check(len(snapshots) == 4, f"one snapshot per launch: {len(snapshots)}")
    with tempfile.TemporaryDirectory() as tmp:
        returned = Path(tmp) / "gpu-load-fake.json"
        returned.write_text(json.dumps(snapshots[-1]), encoding="utf-8")
        check("PARTIAL" in core.summary_text(snapshots[-1]), "a snapshot says it is partial")
        store = core.Store.open(Path(tmp) / "store.json", [returned])
        second = FakeEngine(gpu_like_step, GPU_CURVE)
        result = drive(second, store=store)
    check(not set(first.served) & set(second.served), "nothing from the file is served again")
    check(result["tune"]["sentence"] == whole["tune"]["sentence"], "the same verdict")
    check(result["criterion"] == whole["criterion"], "the same criterion")
    return f"resumed from the JSON after {len(first.served)} launches: {second.served}"


def scenario_schedule_fails_to_start() -> str:
    probe = FakeEngine(gpu_like_step, GPU_CURVE)
    schedule = drive(probe)["tune"]["kept_schedule"]
    key = core.served_key(schedule)
    engine = FakeEngine(gpu_like_step, GPU_CURVE, fail=frozenset({key}))
    result = drive(engine)
    check(result["tune"] is None and key in str(result["tune_error"]), "the failure is the tune's")
    check(result["complete"] and {f"k{k}" for k in core.STATIC_KS} <= set(engine.served),
          "the static sweep still runs")  # fmt: skip
    check("tune stopped" in core.summary_text(result), "the summary says the tune stopped")
    again = drive(FakeEngine(gpu_like_step, GPU_CURVE), store=core.Store(records=dict(
        result["records"])))  # fmt: skip
    check(again["tune_error"] == result["tune_error"], "a recorded failure is not retried")
    return f"schedule failing to start: {str(result['tune_error'])[:70]}"


SCENARIOS = (
    scenario_gpu_schedule_kept,
    scenario_gpu_schedule_refused,
    scenario_cpu_k0_wins,
    scenario_resumed_run_matches,
    scenario_fresh_machine_resumes_from_the_returned_json,
    scenario_schedule_fails_to_start,
)


def main() -> int:
    failed = 0
    for scenario in SCENARIOS:
        name = scenario.__name__.removeprefix("scenario_")
        try:
            print(f"ok   {name}: {scenario()}")
        except AssertionError as exc:
            failed += 1
            print(f"FAIL {name}: {exc}")
    passed = len(SCENARIOS) - failed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def canned_gpu() -> tuple[Callable[[Served], Any], FakeEngine]:
    """The canned GPU machine for ``gpu_load.py plan`` (which launches the loop would make)."""
    engine = FakeEngine(gpu_like_step, GPU_CURVE)
    return engine.serve, engine
