"""``doctor``'s tune rule under load (issue 34): the k served at the running batch the server
shows, judged by the per-level model a ``tune NAME --load`` result saved.

The model comes from the canned CPU-like machine of ``test_tune_load`` (every verified token
costs 2 ms a sequence) with a drafter whose acceptance holds to position 5: k*=6 for one request,
k*=2 at batch 16. The live loop's own steps build it: the plan's launches from the old k=6, the
decision, the schedule's verification bench and the saved ``tune["load"]`` section.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from dflashops.doctor.diagnose import diagnose
from dflashops.doctor.facts import Acceptance, DoctorFacts, LoadModel, RunningBatch
from dflashops.doctor.rules_tune import concurrency_one, tune_gain
from dflashops.doctor.rules_tune_load import find_load_model, judge_load, schedule_k_at
from dflashops.metrics.prometheus import Scrape
from dflashops.playbook.schedule import VLLM_FIELD
from dflashops.tune.acceptance import acceptance_curve
from dflashops.tune.load_model import LoadResult
from dflashops.tune.load_plan import LoadTunePlan
from dflashops.tune.load_runs import LevelRun
from dflashops.tune.load_schedule import ScheduleDecision, decide
from dflashops.tune.load_section import load_section
from dflashops.tune.load_settings import LoadSettings
from dflashops.tune.load_verdict import judge_schedule
from dflashops.tune.schedule import schedule_support
from tests.support.reports import bench_report, level_result
from tests.unit.test_tune_load import LEVELS, bench, cpu_step

OLD_K = 6
CURVE = acceptance_curve([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.1, 0.05])
VLLM = schedule_support("vllm", "0.32.0")
MAX_NUM_SEQS = 64
SOURCE = "tune-ct-20260101-000000.json"


def tuned(
    *, losses: dict[int, float] | None = None, **settings: Any
) -> tuple[LoadResult, ScheduleDecision, list[LevelRun], dict[str, Any]]:
    """``tune ct --load`` on the canned machine from k=6: the model, the decision, the static
    runs and the section as ``tune.json`` holds it (the verification bench loses
    ``losses[level]`` of what the machine gives)."""
    plan = LoadTunePlan(
        settings=LoadSettings.model_validate({"levels": LEVELS, **settings}),
        budget=4,
        current_k=OLD_K,
    )
    runs: list[LevelRun] = []
    while (probe := plan.next_probe(runs)) is not None:
        runs += bench(cpu_step, CURVE, probe.k)
    result = plan.recommend(runs)
    decision = decide(result, VLLM, MAX_NUM_SEQS)
    assert decision.kind == "schedule"
    verify = []
    for level in LEVELS:
        k = decision.schedule.k_at(level)
        tok_s = level * CURVE.tokens_per_step(k) / cpu_step(level, k)
        verify.append(
            LevelRun(
                level=level, k=decision.k, output_tok_s=tok_s * (1 - (losses or {}).get(level, 0))
            )
        )
    assert result.single_k is not None
    verdict = judge_schedule(decision, runs, verify, old_k=OLD_K, fallback_k=result.single_k.k)
    section = load_section(result, decision, runs, verify_runs=verify, verdict=verdict)
    return result, decision, runs, json.loads(json.dumps(section))


@pytest.fixture(scope="module")
def model() -> tuple[LoadResult, ScheduleDecision, list[LevelRun], dict[str, Any]]:
    return tuned()


def facts(
    section: dict[str, Any] | None,
    batch: tuple[float, ...] | None,
    *,
    k: int = OLD_K,
    schedule: list[list[int]] | None = None,
    **fields: Any,
) -> DoctorFacts:
    """A running vLLM 0.32.0 DFlash server at ``k`` (or ``schedule``) whose running batch was
    sampled as ``batch``, with the load model ``section`` (None: no result found)."""
    spec: dict[str, Any] = {
        "method": "dflash",
        "model": "/srv/drafter",
        "num_speculative_tokens": k,
    }
    if schedule is not None:
        spec[VLLM_FIELD] = schedule
    values: dict[str, Any] = {
        "container": "ct",
        "running_argv": ["vllm", "serve", "/models/target"],
        "engine": "vllm",
        "engine_version": "0.32.0",
        "device": "cpu",
        "speculative_config": spec,
        "running_batch": None
        if batch is None
        else RunningBatch(samples=batch, source="/metrics over 10 s"),
        "load_model": None
        if section is None
        else LoadModel(section=section, source=SOURCE, engine="vllm", engine_version="0.32.0"),
    }
    values.update(fields)
    return DoctorFacts(**values)


AROUND_16 = (15.0, 16.0, 16.0, 17.0, 16.0, 0.0)


def test_the_model_has_k6_best_for_one_request_and_k2_at_batch_16(model: Any) -> None:
    result, decision, _, section = model
    assert result.k_by_level == {1: 6, 2: 5, 4: 3, 8: 2, 16: 2, 32: 1}
    assert section["verdict"]["accepted"] is True
    assert section["verdict"]["schedule"] == decision.schedule.as_vllm()


def test_k6_at_batch_16_gets_the_finding_with_the_schedule(model: Any) -> None:
    result, decision, _, section = model
    outcome = tune_gain(facts(section, AROUND_16))
    assert len(outcome.findings) == 1
    finding = outcome.findings[0]
    choice = result.choice(16)
    k6, k2 = choice.prediction(6), choice.prediction(2)
    assert k6 is not None and k2 is not None
    loss = 1 - k6.tok_s / k2.tok_s
    assert loss > 0.05
    assert finding.rule == "tune" and finding.severity == "warning"
    assert finding.impact == pytest.approx(loss)
    assert finding.details["predicted_loss"] == pytest.approx(loss)
    assert finding.details["running_batch"] == 16
    assert (finding.details["level"], finding.details["served_k"]) == (16, 6)
    assert finding.details["best_k"] == 2
    schedule = decision.schedule.as_vllm()
    compact = json.dumps(schedule, separators=(",", ":"))
    assert finding.details["kept_schedule"] == schedule
    assert finding.title.startswith(
        f"at running batch 16 the server runs k=6, {loss:.0%} below k=2 (the tune --load model "
        "at c=16)"
    )
    assert finding.title.endswith(f"serve the schedule {compact}")
    assert finding.fix == (
        f"`dflashops launch ct --set server.num_speculative_tokens={decision.schedule.max_k} "
        f"--set 'server.speculative_schedule={compact}'` (or set both in the playbook); "
        "`dflashops tune ct --load 1,2,4,8,16,32` measures again"
    )
    evidence = "\n".join(finding.evidence)
    assert "running batch 16 (median of 5 busy sample(s), 15-17, 1 idle" in evidence
    assert "served: num_speculative_tokens 6, no schedule" in evidence
    assert (
        f"k=2 {k2.tok_s:.1f} tok/s" in evidence and f"k=6 {k6.tok_s:.1f} tok/s measured" in evidence
    )
    assert f"tune --load kept the schedule {compact}: k=2 at batch 16" in evidence


def test_k6_at_batch_1_where_it_is_k_star_gets_none(model: Any) -> None:
    section = model[3]
    outcome = tune_gain(facts(section, (1.0, 1.0, 0.0, 1.0)))
    assert outcome.findings == [] and not outcome.skipped
    assert outcome.note.startswith("k=6 at running batch 1 is within 5% of the tune --load")
    assert outcome.note.endswith("best at c=1 (batch 1), k=6 (+0.0%)")


def test_a_small_loss_between_levels_is_within_the_tolerance(model: Any) -> None:
    # at c=4 k=6 is 3.9 % below k*=3: noise, not a finding
    assert tune_gain(facts(model[3], (4.0, 4.0))).findings == []


def test_a_server_already_serving_the_schedule_gets_none(model: Any) -> None:
    _, decision, _, section = model
    schedule = decision.schedule.as_vllm()
    for batch in (1.0, 3.0, 16.0, 32.0):
        outcome = tune_gain(facts(section, (batch,), k=decision.schedule.max_k, schedule=schedule))
        assert outcome.findings == [], batch


def test_a_schedule_that_serves_k6_at_batch_16_is_named(model: Any) -> None:
    section = model[3]
    hand = [[1, 16, 6], [17, 64, 1]]
    finding = tune_gain(facts(section, (16.0,), schedule=hand)).findings[0]
    assert finding.details["served_schedule"] == hand
    assert finding.details["served_k"] == 6
    assert finding.evidence[1] == (
        "served: num_speculative_tokens_per_batch_size [[1,16,6],[17,64,1]] "
        "(num_speculative_tokens 6): k=6 at batch 16"
    )
    # a schedule is replaced whole: the kept one, with its own largest k
    assert "--set 'server.speculative_schedule=" in finding.fix
    # the same schedule at batch 32 serves k=1, within 5 % of k*=1 there
    assert tune_gain(facts(section, (32.0,), schedule=hand)).findings == []


def test_the_served_schedule_is_looked_up_as_vllm_does() -> None:
    schedule = [[1, 2, 6], [4, 8, 3], [16, 64, 0]]
    assert [schedule_k_at(schedule, b, 6) for b in (1, 2, 3, 4, 9, 15, 16, 100)] == [
        6,
        6,
        6,  # a gap carries the previous k forward
        3,
        3,
        3,
        0,
        0,  # past the last range: its k
    ]
    assert schedule_k_at([[1, 4, 8]], 2, 5) == 5  # capped at num_speculative_tokens


def test_a_refused_schedule_recommends_the_single_k(model: Any) -> None:
    result, _, _, section = tuned(losses={4: 0.2})
    assert section["verdict"]["accepted"] is False
    single = section["verdict"]["k"]
    assert result.single_k is not None and single == result.single_k.k
    finding = tune_gain(facts(section, AROUND_16)).findings[0]
    assert finding.details["kept_schedule"] is None and finding.details["kept_k"] == single
    assert finding.fix.startswith(
        f"`dflashops launch ct --set server.num_speculative_tokens={single}` (or set it in the "
        "playbook)"
    )
    assert finding.title.endswith(f"serve k={single}")
    k_single = result.choice(16).prediction(single)
    assert k_single is not None
    assert f"tune --load kept k={single}, {k_single.tok_s:.1f} tok/s measured at c=16" in (
        finding.evidence
    )


def test_what_tune_load_kept_is_not_reported_again() -> None:
    # the schedule refused, tune --load kept k=3 for the whole mix: 5.3 % below k*=1 at c=32
    result, _, _, section = tuned(losses={4: 0.2})
    single = section["verdict"]["k"]
    kept, best = result.choice(32).prediction(single), result.choice(32).prediction(1)
    assert kept is not None and best is not None and 1 - kept.tok_s / best.tok_s > 0.05
    outcome = tune_gain(facts(section, (32.0,), k=single))
    assert outcome.findings == []
    assert f"and it is what tune --load kept: {section['verdict']['sentence']}" in outcome.note


def collapsing() -> Acceptance:
    """The concurrency-1 rule's case (test_doctor_rules): acceptance collapsing before k=8."""
    rates = (0.7, 0.4, 0.15, 0.05, 0.02, 0.01, 0.0, 0.0)
    return Acceptance(
        k=8,
        per_position=rates,
        acceptance_length=1 + sum(rates),
        num_drafts=400,
        source="doctor probe",
        decode_tok_s=100.0,
    )


def test_without_a_load_model_the_concurrency_1_rule_decides_as_before() -> None:
    plain = facts(None, None, k=8, acceptance=collapsing())
    before = concurrency_one(plain)
    assert before.findings and before.findings[0].fix == "dflashops tune ct"
    assert tune_gain(plain) == before
    # an idle or one-request server: nothing to add
    assert tune_gain(facts(None, (1.0, 0.0), k=8, acceptance=collapsing())) == before


def test_without_a_load_model_a_busy_server_is_told_how_to_get_one() -> None:
    busy = tune_gain(facts(None, AROUND_16, k=8, acceptance=collapsing()))
    before = concurrency_one(facts(None, None, k=8, acceptance=collapsing()))
    finding = busy.findings[0]
    assert finding.title == before.findings[0].title and finding.fix == before.findings[0].fix
    assert finding.evidence[:-1] == before.findings[0].evidence
    assert finding.evidence[-1] == (
        "the server ran at batch ~16 (median over the window), and this model is one "
        "request's: `dflashops tune ct --load 1,2,4,8,16` measures k per batch size, and "
        "doctor then judges k at the batch it sees"
    )


def test_an_idle_window_leaves_the_concurrency_1_rule_to_decide(model: Any) -> None:
    section = model[3]
    idle = facts(section, (0.0, 0.0), k=8, acceptance=collapsing())
    outcome = tune_gain(idle)
    assert outcome.findings[0].fix == "dflashops tune ct"
    assert outcome.findings[0].evidence[-1] == (
        f"a tune --load model ({SOURCE}) is there, but the server ran no request over the "
        "window: no batch size to judge k at"
    )


def test_a_model_of_another_engine_release_is_not_used(model: Any) -> None:
    section = model[3]
    old = LoadModel(section=section, source=SOURCE, engine="vllm", engine_version="0.25.0")
    judged = judge_load(facts(section, AROUND_16, load_model=old))
    assert judged.result is None
    assert judged.note == (
        f"the tune --load model ({SOURCE}) was measured on vllm==0.25.0, the server runs "
        "vllm==0.32.0: `dflashops tune ct --load 1,2,4,8,16,32` measures it again"
    )


def test_a_batch_past_the_measured_levels_asks_for_a_wider_ladder(model: Any) -> None:
    judged = judge_load(facts(model[3], (200.0, 190.0)))
    assert judged.result is None
    assert "outside what the tune --load model measured (batch 1..32" in judged.note
    assert "`dflashops tune ct --load 1,2,4,8,16,32,64,128,256` measures it" in judged.note


def test_a_section_doctor_cannot_read_is_a_note() -> None:
    judged = judge_load(facts({"mode": "load"}, AROUND_16))
    assert judged.result is None and judged.note.startswith(f"{SOURCE}: no per-level model")


def test_under_a_tpot_limit_the_miss_is_evidence_and_a_small_loss_still_counts() -> None:
    # 45 ms median TPOT: at c=16 k=2 (41.5 ms) meets it, k=6 (49.0 ms) does not
    result, _, _, section = tuned(tpot_slo_ms=45.0)
    choice = result.choice(16)
    k6, best = choice.prediction(6), choice.prediction(choice.best_k)
    assert k6 is not None and k6.meets_slo is False
    assert best is not None and best.meets_slo is True
    finding = tune_gain(facts(section, AROUND_16)).findings[0]
    assert (
        "k=6 misses the TPOT limit of aggregate output tok/s with median TPOT under 45 ms"
        in finding.evidence
    )
    # k=3 is 2 % below k=2 at c=16: within the tolerance, unless it misses the limit
    assert tune_gain(facts(section, AROUND_16, k=3)).findings == []
    for row in section["predictions"]:
        if (row["level"], row["k"]) == (16, 3):
            row["meets_slo"] = False
    missed = tune_gain(facts(section, AROUND_16, k=3)).findings[0]
    assert missed.title.startswith(
        "at running batch 16 the server runs k=3, missing the TPOT limit that k=2 meets (the "
        "tune --load model at c=16)"
    )


def test_diagnose_ranks_the_load_finding_under_the_tune_rule(model: Any) -> None:
    findings, checks = diagnose(facts(model[3], AROUND_16))
    assert [f.rule for f in findings] == ["tune"]
    assert {c.rule: c.outcome for c in checks}["tune"] == "found"


# --- what gather reads ------------------------------------------------------------------------

RUNNING_TEXT = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"}} {}
vllm:num_requests_running{{engine="1",model_name="m"}} {}
"""


def test_running_batch_sums_engines_over_the_scrapes() -> None:
    scrapes = [Scrape.parse(RUNNING_TEXT.format(a, b)) for a, b in ((8, 8), (7, 9), (0, 0))]
    sampled = RunningBatch.from_scrapes([*scrapes, None], "/metrics, 3 scrapes over 10 s")
    assert sampled is not None
    assert sampled.samples == (16.0, 16.0, 0.0) and sampled.median == 16.0
    assert RunningBatch.from_scrapes([Scrape.parse("# nothing\n")], "x") is None


def save(path: Path, *, container: str = "ct", tune: dict[str, Any] | None = None) -> Path:
    report = bench_report(
        [level_result()], container=container, engine="vllm", engine_version="0.32.0"
    )
    return report.model_copy(update={"tune": tune}).save(path)


def test_the_newest_load_result_of_the_container_is_found(tmp_path: Path, model: Any) -> None:
    section = model[3]
    older = save(tmp_path / "tune-ct-20260101-000000.json", tune={"load": section})
    save(tmp_path / "tune-ct-20260102-000000.json", tune={"k": 4})  # concurrency 1
    save(tmp_path / "tune-ct-3-k6.json")  # a probe's bench
    save(tmp_path / "tune-ct-20260103-000000.json", container="other", tune={"load": section})
    (tmp_path / "tune-ct-broken.json").write_text("{", encoding="utf-8")
    for age, name in enumerate(sorted(p.name for p in tmp_path.iterdir())):
        os.utime(tmp_path / name, (1_000_000 + age, 1_000_000 + age))
    found, note = find_load_model("ct", tmp_path)
    assert found is not None and note == ""
    assert found.source == str(older) and found.section == section
    assert (found.engine, found.engine_version) == ("vllm", "0.32.0")
    none, why = find_load_model("ct2", tmp_path)
    assert none is None and why == (f"no `tune ct2 --load` result in {tmp_path} (tune-ct2-*.json)")
