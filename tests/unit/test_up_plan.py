"""``up``'s decisions without a lab: which steps a run runs and why, how step digests chain,
what each step's inputs are, how run records are kept, and how pairs are formed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dflashops.errors import PlaybookError
from dflashops.inventory.load import load_inventory
from dflashops.playbook.load import load_playbook, resolve_playbook_path
from dflashops.up.inputs import DrafterFiles, step_inputs, tune_asked, tune_key
from dflashops.up.outputs import TuneOutput
from dflashops.up.pairs import resolve_pairs
from dflashops.up.plan import (
    STEPS,
    PlannedStep,
    chain_digests,
    input_digests,
    plan_pair,
    runs_anything,
)
from dflashops.up.record import (
    PairRecord,
    RecordError,
    StepRecord,
    UpError,
    load_record,
    pair_id,
    read_record,
    save_record,
)
from dflashops.up.request import UpRequest
from dflashops.up.tune_load import load_line

WHEN = datetime(2026, 12, 4, 1, 0, tzinfo=UTC)
GUESSED = DrafterFiles("aaa", "weights-1")
CORRECTED = DrafterFiles("bbb", "weights-1")

INVENTORY = """\
version: 1
clusters:
  lab:
    api_url: https://127.0.0.1:8006
    auth: {user: root@pam, password: {env: PVE_PASSWORD}}
    nodes: {lab: {ssh: {host: 127.0.0.1}}}
containers:
  lab-ct1: {vmid: 200, network: {ip: 10.200.0.10/24}}
  lab-ct2: {vmid: 201, network: {ip: 10.200.0.11/24}}
"""


def lab_book(tmp_path: Path, text_edit: tuple[str, str] | None = None) -> Path:
    text = resolve_playbook_path("lab-dflash").read_text()
    if text_edit:
        assert text.count(text_edit[0]) == 1
        text = text.replace(*text_edit)
    path = tmp_path / "book.yaml"
    path.write_text(text)
    return path


Own = dict[str, dict[str, str]]


def digests_for(book_path: Path, files: DrafterFiles) -> tuple[dict[str, str], Own]:
    inputs = step_inputs({"name": "lab-ct1"}, load_playbook(book_path), files)
    return chain_digests(inputs), {s: input_digests(inputs[s]) for s in STEPS}


def finished(digests: dict[str, str], own: Own) -> PairRecord:
    """A record where every step succeeded with these inputs."""
    record = PairRecord(
        pair="p", playbook="book.yaml", playbook_name="lab-dflash", container="lab-ct1",
        cluster="lab", node="lab",
    )  # fmt: skip
    for step in STEPS:
        record.steps[step] = StepRecord(
            status="ok", digest=digests[step], inputs=own[step], finished_at=WHEN
        )
    return record


def actions(plan: list[PlannedStep]) -> dict[str, str]:
    return {p.step: p.action for p in plan}


def test_a_first_run_runs_every_step(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    plan = plan_pair(None, digests, own)
    assert [p.step for p in plan] == list(STEPS)
    assert {p.action for p in plan} == {"run"}
    assert plan[0].reason == "never run"


def test_a_finished_pair_with_the_same_inputs_runs_nothing(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    plan = plan_pair(finished(digests, own), digests, own)
    assert not runs_anything(plan)
    assert plan[0].reason == "done 2026-12-04 01:00 UTC, inputs unchanged"


def test_a_changed_drafter_config_reruns_from_the_drafter_step_and_names_it(
    tmp_path: Path,
) -> None:
    book = lab_book(tmp_path)
    record = finished(*digests_for(book, GUESSED))
    digests, own = digests_for(book, CORRECTED)  # the config was pushed or copied over since
    plan = plan_pair(record, digests, own)
    assert actions(plan)["provision"] == "skip"
    assert plan[1].action == "run" and plan[1].reason == "changed: drafter config"
    for later in plan[2:]:
        assert (later.action, later.reason) == ("run", "drafter runs again before it")


def test_a_changed_bench_section_reruns_bench_tune_and_report_only(tmp_path: Path) -> None:
    record = finished(*digests_for(lab_book(tmp_path), GUESSED))
    changed = lab_book(tmp_path, ("  requests: 4\n", "  requests: 6\n"))
    digests, own = digests_for(changed, GUESSED)
    plan = plan_pair(record, digests, own)
    assert actions(plan) == {
        "provision": "skip", "drafter": "skip", "launch": "skip", "smoke": "skip",
        "bench": "run", "tune": "run", "report": "run",
    }  # fmt: skip
    assert plan[4].reason == "changed: bench"


def test_from_redoes_from_that_step_even_when_nothing_changed(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    plan = plan_pair(finished(digests, own), digests, own, from_step="bench")
    assert [p.step for p in plan if p.action == "run"] == ["bench", "tune", "report"]
    assert plan[4].reason == "--from bench"
    with pytest.raises(ValueError, match="--from banch: not a step"):
        plan_pair(None, digests, own, from_step="banch")


def test_a_failed_or_unfinished_step_runs_again_with_the_reason(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    record = finished(digests, own)
    record.steps["drafter"] = StepRecord(status="failed", error="drafter check found 3 error(s)")
    plan = plan_pair(record, digests, own)
    assert plan[1].reason == "failed last time: drafter check found 3 error(s)"
    assert [p.step for p in plan if p.action == "run"] == list(STEPS[1:])
    record = finished(digests, own)
    record.steps["tune"] = StepRecord(status="pending")  # a run stopped (Ctrl-C) before tune
    plan = plan_pair(record, digests, own)
    assert [p.step for p in plan if p.action == "run"] == ["tune", "report"]
    assert plan[5].reason == "did not finish last time (pending)"


def test_a_forced_drafter_is_checked_again_by_a_run_without_force(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    record = finished(digests, own)
    record.steps["drafter"].forced = True
    assert not runs_anything(plan_pair(record, digests, own, force=True))
    plan = plan_pair(record, digests, own)
    assert plan[1].action == "run" and "--force before" in plan[1].reason


def test_a_stale_launch_runs_again_and_the_steps_after_it_follow(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    stale = {"launch": "the server it launched is not serving (deployed, not running)"}
    plan = plan_pair(finished(digests, own), digests, own, stale=stale)
    assert [p.step for p in plan if p.action == "run"] == list(STEPS[2:])
    assert plan[2].reason == stale["launch"]
    assert plan[3].reason == "launch runs again before it"
    # a step that runs anyway says its own reason; --from says its own
    record = finished(digests, own)
    record.steps["drafter"] = StepRecord(status="failed", error="x")
    assert plan_pair(record, digests, own, stale=stale)[2].reason == "drafter runs again before it"
    from_launch = plan_pair(finished(digests, own), digests, own, from_step="launch", stale=stale)
    assert from_launch[2].reason == "--from launch"


def test_until_leaves_the_later_steps_out(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    plan = plan_pair(None, digests, own, until="provision")
    assert actions(plan)["provision"] == "run"
    assert {p.action for p in plan[1:]} == {"not asked"}


def test_digests_chain_so_an_early_change_moves_every_later_digest(tmp_path: Path) -> None:
    book = lab_book(tmp_path)
    before, _ = digests_for(book, GUESSED)
    after, _ = digests_for(book, CORRECTED)
    assert before["provision"] == after["provision"]
    assert all(before[s] != after[s] for s in STEPS[1:])
    assert digests_for(book, GUESSED)[0] == before  # stable: sorted canonical JSON


def test_step_inputs_keep_serving_apart_from_bench_and_tune(tmp_path: Path) -> None:
    book = load_playbook(lab_book(tmp_path))
    inputs = step_inputs({}, book, GUESSED)
    assert "bench" not in inputs["launch"]["playbook"]
    assert "tune" not in inputs["launch"]["playbook"]
    assert inputs["drafter"]["drafter config"] == "aaa"
    assert tune_asked(book)
    untuned = ("tune:\n  k_min: 1\n  k_max: 8\n  budget: 4\n", "")
    assert not tune_asked(load_playbook(lab_book(tmp_path, untuned)))


def test_a_tune_key_ignores_k_but_not_the_drafter_files(tmp_path: Path) -> None:
    book = load_playbook(lab_book(tmp_path))
    other_k = load_playbook(
        lab_book(tmp_path, ("num_speculative_tokens: 4\n", "num_speculative_tokens: 2\n"))
    )
    assert tune_key(book, CORRECTED) == tune_key(other_k, CORRECTED)
    assert tune_key(book, CORRECTED) != tune_key(book, GUESSED)
    # what tune --load writes (k and a schedule) is not part of what it was tuned for; the
    # levels it was tuned at are
    scheduled = load_playbook(
        lab_book(
            tmp_path,
            (
                "num_speculative_tokens: 4\n",
                "num_speculative_tokens: 4\n  speculative_schedule: [[1, 2, 4], [3, 256, 1]]\n",
            ),
        )
    )
    assert tune_key(scheduled, CORRECTED) == tune_key(book, CORRECTED)
    loaded = book.model_copy(update={"tune": book.tune.model_copy(update={"load": [1, 16]})})
    assert tune_key(loaded, CORRECTED) != tune_key(book, CORRECTED)


def test_a_load_tune_output_keeps_its_schedule_through_the_record() -> None:
    output = TuneOutput(
        best_k=4,
        start_k=4,
        launches=[4, 0, 4, 4],
        load_levels=[1, 16],
        k_by_level={"1": 4, "16": 1},
        schedule=[[1, 2, 4], [3, 256, 1]],
        decision="schedule",
        verdict="schedule kept",
        schedule_kept=True,
    )
    again = TuneOutput.model_validate(json.loads(json.dumps(output.to_record())))
    assert again == output and again.schedule == [[1, 2, 4], [3, 256, 1]]
    assert load_line(again) == "schedule [[1, 2, 4], [3, 256, 1]] (c=1: k=4, c=16: k=1; 4 launches)"


def test_records_round_trip_and_a_broken_one_says_how_to_start_afresh(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    record = finished(digests, own)
    save_record(tmp_path, record)
    assert load_record(tmp_path, "p") == record
    assert load_record(tmp_path, "absent") is None
    (tmp_path / "p" / "record.json").write_text('{"pair": 3}')
    with pytest.raises(UpError, match="not an up run record") as raised:
        load_record(tmp_path, "p")
    assert raised.value.hint and "delete" in raised.value.hint
    assert pair_id("lab", "lab-ct1", "lab-dflash") == "lab-dflash@lab.lab-ct1"
    assert "/" not in pair_id("a/b", "c d", "../x")


def test_an_unreadable_record_is_invalid_input_and_afresh_keeps_it_aside(tmp_path: Path) -> None:
    digests, own = digests_for(lab_book(tmp_path), GUESSED)
    path = save_record(tmp_path, finished(digests, own))
    path.write_text(path.read_text()[:100])
    with pytest.raises(RecordError) as raised:
        read_record(tmp_path, "p", afresh=False, keep=True)
    assert raised.value.cli_exit_code == 2 and raised.value.path == path
    assert "--from provision" in (raised.value.hint or "")
    # a dry run (keep=False) reads it as none and leaves it where it is
    record, warning = read_record(tmp_path, "p", afresh=True, keep=False)
    assert record is None and warning is not None and path.is_file()
    record, warning = read_record(tmp_path, "p", afresh=True, keep=True)
    assert record is None and warning is not None and not path.exists()
    [aside] = path.parent.glob("record.json.unreadable-*")
    assert aside.name in warning
    # another pair's record copied over is not this pair's
    save_record(tmp_path, finished(digests, own).model_copy(update={"pair": "other"}))
    (tmp_path / "other" / "record.json").replace(path)
    with pytest.raises(RecordError, match="it is the record of other"):
        load_record(tmp_path, "p")


def test_pairs_come_from_the_playbook_or_from_each_c(tmp_path: Path) -> None:
    inventory_file = tmp_path / "inventory.yaml"
    inventory_file.write_text(INVENTORY)
    inventory = load_inventory(inventory_file)
    book = lab_book(tmp_path)
    request = UpRequest(playbooks=(book,), state_dir=tmp_path)
    assert [p.container for p in resolve_pairs(inventory, request)] == ["lab-ct1"]
    both = request.model_copy(update={"containers": ("lab-ct1", "lab-ct2", "lab-ct1")})
    pairs = resolve_pairs(inventory, both)
    assert [p.id for p in pairs] == ["lab-dflash@lab.lab-ct1", "lab-dflash@lab.lab-ct2"]
    nameless = lab_book(tmp_path, ("container: lab-ct1\n", ""))
    with pytest.raises(PlaybookError, match="names no container"):
        resolve_pairs(inventory, UpRequest(playbooks=(nameless,), state_dir=tmp_path))


def test_the_report_step_writes_plots_and_a_summary_of_the_record(tmp_path: Path) -> None:
    from dflashops.up.summary import write_run_report
    from tests.support.reports import bench_report, level_result

    report = bench_report(
        [
            level_result(
                output_throughput=41.5,
                spec_decode_acceptance_length=2.6,
                spec_decode_per_position_acceptance_rates=[0.8, 0.5, 0.2, 0.1],
                spec_decode_num_drafts=10,
                spec_decode_accepted_tokens=16,
            )
        ],
        container="lab-ct1",
        method="dflash",
        num_speculative_tokens=4,
    )
    bench_file = report.save(tmp_path / "bench.json")
    record = PairRecord(
        pair="lab-dflash@lab.lab-ct1", playbook="b.yaml", playbook_name="lab-dflash",
        container="lab-ct1", cluster="lab", node="lab",
    )  # fmt: skip
    record.steps["bench"] = StepRecord(
        status="ok",
        summary="41.5 tok/s, acceptance length 2.60",
        seconds=12.3,
        outputs={"file": str(bench_file), "output_throughput": 41.5, "k": 4,
                 "spec_decode_acceptance_length": 2.6},
    )  # fmt: skip
    record.steps["tune"] = StepRecord(status="failed", error="k|x went wrong")
    files = write_run_report(record, tmp_path)
    assert files[0] == tmp_path / "summary.md"
    assert {p.suffix for p in files[1:]} == {".png"} and len(files) >= 2
    summary = files[0].read_text()
    assert "41.5 output tok/s, acceptance length 2.60, k=4" in summary
    assert "| bench | ok | 41.5 tok/s, acceptance length 2.60 | 12.3 |" in summary
    assert "| tune | failed | k\\|x went wrong | - |" in summary  # a | in text keeps the table
