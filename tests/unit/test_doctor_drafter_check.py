"""doctor's drafter-check rule: the method's own drafter check, run again on the files served
now, as findings (errors critical, warnings a warning; notes alone are clean)."""

from __future__ import annotations

from dflashops.doctor.diagnose import diagnose
from dflashops.doctor.drafter_check import check_command
from dflashops.doctor.facts import DoctorFacts, DrafterCheckFacts
from dflashops.doctor.rules_drafter_check import MAX_SHOWN, drafter_check
from dflashops.drafter.result import Finding as CheckFinding
from dflashops.launch.validation import DrafterValidation
from dflashops.playbook.load import load_playbook, resolve_playbook_path

COMMAND = "dflashops drafter check ct:/models/d --target ct:/models/t --method eagle3"


def facts_with(validation: DrafterValidation | None, note: str = "") -> DoctorFacts:
    facts = DoctorFacts(container="ct", running_argv=["vllm", "serve"])
    facts.speculative_config = {"method": "eagle3", "num_speculative_tokens": 3}
    if validation is not None:
        facts.drafter_check = DrafterCheckFacts(validation, "eagle3", COMMAND)
    facts.drafter_check_note = note
    return facts


def finding(severity: str, key: str) -> CheckFinding:
    return CheckFinding(severity, key, "what the engine reads", "what the file says", "why", "c")  # type: ignore[arg-type]


def test_an_error_is_critical_and_lists_errors_before_warnings() -> None:
    validation = DrafterValidation(
        "errors",
        (finding("warning", "t2d"), finding("error", "fc.weight"), finding("info", "ids")),
    )
    (found,) = drafter_check(facts_with(validation)).findings
    assert found.rule == "drafter-check" and found.severity == "critical"
    assert found.title == (
        "the eagle3 drafter check finds 1 error(s), 1 warning(s) in the files served now"
    )
    assert found.evidence[0].startswith("error: fc.weight: expected what the engine reads")
    assert found.evidence[1].startswith("warning: t2d")
    assert COMMAND in found.fix
    assert [f["key"] for f in found.details["findings"]] == ["fc.weight", "t2d"]


def test_warnings_alone_are_a_warning_and_long_lists_are_cut() -> None:
    many = tuple(finding("warning", f"key{i}") for i in range(MAX_SHOWN + 3))
    (found,) = drafter_check(facts_with(DrafterValidation("warnings", many))).findings
    assert found.severity == "warning"
    assert len(found.evidence) == MAX_SHOWN + 1 and found.evidence[-1] == "… and 3 more"
    assert len(found.details["findings"]) == MAX_SHOWN + 3


def test_notes_alone_are_clean() -> None:
    result = drafter_check(facts_with(DrafterValidation("clean", (finding("info", "ids"),))))
    assert not result.findings and result.note == "the eagle3 drafter check is clean (1 notes)"


def test_a_method_without_a_check_or_no_playbook_is_skipped_with_the_reason() -> None:
    not_run = DrafterValidation("not run", reason="method none: no drafter to check")
    assert drafter_check(facts_with(not_run)).skipped == "method none: no drafter to check"
    skipped = drafter_check(facts_with(None, "no playbook names ct: pass -p")).skipped
    assert skipped == "no playbook names ct: pass -p"


def test_diagnose_runs_it_and_ranks_a_critical_check() -> None:
    validation = DrafterValidation("errors", (finding("error", "draft_vocab_size"),))
    findings, checks = diagnose(facts_with(validation))
    assert any(f.rule == "drafter-check" and f.severity == "critical" for f in findings)
    assert {c.rule: c.outcome for c in checks}["drafter-check"] == "found"


def test_the_command_names_the_container_s_files_the_method_and_the_engine() -> None:
    book = load_playbook(resolve_playbook_path("qwen3.6-27b-dflash"))
    assert check_command(book, "qwen36") == (
        "dflashops drafter check qwen36:/models/Qwen3.6-27B-DFlash "
        "--target qwen36:/models/Qwen3.6-27B --method dflash --engine vllm==0.34.0"
    )
    ngram = load_playbook(
        resolve_playbook_path("qwen3.6-27b-dflash"), ["drafter.method=ngram", "drafter.model=null"]
    )
    assert check_command(ngram, "qwen36").startswith(
        "dflashops drafter check qwen36:/models/Qwen3.6-27B --target qwen36:/models/Qwen3.6-27B"
    )
