"""The launch core's plan from canned facts: one playbook gives the same manifest on a single
container and on a placement's members (but the fields a role decides), the drafter judgement is
made once with one text, and a dry run's report is the plan itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.deployment.manifest import DeployedManifest
from dflashops.drafter.result import Finding
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import LocalWheel
from dflashops.launch.args import TargetFacts, speculative_json
from dflashops.launch.describe import plan_report
from dflashops.launch.facts import HostFacts, launch_paths, parse_shas, sha_script
from dflashops.launch.group import PlacementLaunchReport
from dflashops.launch.judge import DrafterJudgement, DrafterRefused, judge
from dflashops.launch.launch_plan import LaunchPlan, plan_group, plan_restart, plan_single
from dflashops.launch.lifecycle import RunState
from dflashops.launch.placement import Member
from dflashops.launch.validation import DrafterValidation
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook

REPO = Path(__file__).resolve().parents[2]
GROUP_BOOK = load_playbook(REPO / "playbooks" / "lab-multinode.yaml")
SINGLE_BOOK = GROUP_BOOK.model_copy(update={"placement": None})
WHEEL = LocalWheel(Path("/tmp/dflashops-0.1.0-py3-none-any.whl"), "b" * 64, "0.1.0")
HEAD, WORKER = Member("lab-ct1", 0, "10.77.0.11", 1), Member("lab-ct2", 1, "10.77.0.12", 1)
ENDPOINT = "http://10.77.0.11:30000/v1"
CLEAN = DrafterJudgement(DrafterValidation("clean"), TargetFacts(), False, ())

# what differs between a single container and a placement member by role, and why
ROLE_FIELDS = {
    "container",  # each member's own name
    "files",  # a member adds placement.json and its TMPDIR marker
    "spec",  # a member's argv carries --nnodes/--node-rank/--master-addr (a worker
    # --headless), its env VLLM_HOST_IP and TMPDIR; the workers serve no HTTP (no key)
    "deployed_at",  # the time each plan was made
}


def facts(name: str, address: str, *, running: bool = False) -> HostFacts:
    wanted = engine_venv.VenvWanted(GROUP_BOOK.engine, WHEEL, DEFAULT_LAYOUT)
    base = "/opt/lab/venv-vllm-cpu"  # the lab's mounted engine venv, as the playbook names it
    venv = engine_venv.VenvFacts(
        venv=wanted.venv,
        venv_python=None,
        base=engine_venv.PythonFacts(
            f"{base}/lib/python3.11/site-packages", f"{base}/bin/python", "0.32.0", None, True
        ),
        base_wanted=base,
        pth=None,
        marker=None,
        has_python3=True,
    )
    pid = 4242 if running else None
    return HostFacts(
        name=name,
        address=address,
        layout=DEFAULT_LAYOUT,
        state=RunState(pid, None, False, False, 0, 0),
        manifest=None,
        files=dict.fromkeys(launch_paths(DEFAULT_LAYOUT)),
        venv_wanted=wanted,
        venv=venv,
    )


def single(book: Playbook = SINGLE_BOOK, judgement: DrafterJudgement = CLEAN) -> LaunchPlan:
    return plan_single(
        facts(HEAD.name, HEAD.address),
        book,
        judgement,
        api_key="sk-test",
        endpoint=ENDPOINT,
        wheel=WHEEL,
    )


def group(judgement: DrafterJudgement = CLEAN) -> LaunchPlan:
    return plan_group(
        [facts(HEAD.name, HEAD.address), facts(WORKER.name, WORKER.address)],
        [HEAD, WORKER],
        GROUP_BOOK,
        judgement,
        api_key="sk-test",
        endpoint=ENDPOINT,
        wheel=WHEEL,
    )


def fields(manifest: DeployedManifest) -> dict[str, Any]:
    return {k: v for k, v in manifest.model_dump().items() if k not in ROLE_FIELDS}


def test_the_same_playbook_gives_the_same_manifest_on_one_container_and_on_every_member() -> None:
    alone = fields(single().head.manifest)
    for member in group().members:
        assert fields(member.manifest) == alone, member.name


def test_the_fields_that_differ_by_role_differ_for_the_reason_the_test_names() -> None:
    alone = single().head.manifest
    head, worker = (m.manifest for m in group().members)
    assert worker.container == "lab-ct2"
    extra = {"/etc/dflashops/placement.json", "/var/lib/dflashops/tmp/README"}
    assert {f.path for f in head.files} == {f.path for f in alone.files} | extra
    assert "/etc/dflashops/secrets.env" not in {f.path for f in worker.files}  # no HTTP there
    assert "--headless" in worker.spec["argv"] and "--headless" not in head.spec["argv"]
    assert worker.spec["env"]["VLLM_HOST_IP"] == WORKER.address
    assert alone.spec["argv"][-2:] == ["--dtype", "float32"]


def test_the_speculative_config_is_what_the_engine_is_given() -> None:
    manifest = single().head.manifest
    argv = manifest.spec["argv"]
    given = argv[argv.index("--speculative-config") + 1]
    assert manifest.speculative_config is not None
    assert speculative_json(manifest.speculative_config) == given


def failing() -> DrafterValidation:
    finding = Finding(
        severity="error",
        key="mask_token_id",
        expected="151669",
        found="0",
        why="the mask id is a real token",
        check="mask",
    )
    return DrafterValidation("errors", (finding,))


def test_a_failing_drafter_is_refused_with_one_text_unless_forced() -> None:
    with pytest.raises(DrafterRefused) as refused:
        judge(failing(), TargetFacts(), force=False)
    assert refused.value.message == (
        "drafter check found 1 error(s): mask_token_id: expected 151669, found 0"
    )
    forced = judge(failing(), TargetFacts(), force=True)
    assert forced.forced and forced.status == "errors (forced)"
    assert forced.warnings[0].startswith("--force: LAUNCHING OVER 1 DRAFTER ERROR(S)")
    for plan in (single(judgement=forced), group(judgement=forced)):
        assert plan.warnings[0].startswith("--force: LAUNCHING OVER 1 DRAFTER ERROR(S)")
        assert all(m.manifest.forced for m in plan.members)
        # the host's preflight must not refuse what the operator forced
        assert all(m.manifest.spec.get("method") is None for m in plan.members)


def test_force_over_a_clean_drafter_records_no_force() -> None:
    clean = judge(DrafterValidation("clean"), TargetFacts(), force=True)
    assert not clean.forced and clean.warnings == ()
    for member in group(judgement=clean).members:
        assert not member.manifest.forced
        assert member.manifest.drafter_validation == "clean"


def test_a_group_restarts_as_one_when_any_member_must() -> None:
    plan = group()
    assert plan.restart
    assert plan.reason.startswith("lab-ct1: changed: ") and "; lab-ct2: changed: " in plan.reason
    assert [m.name for m in plan.start_order] == ["lab-ct2", "lab-ct1"]


def test_a_dry_run_reports_the_plan() -> None:
    report = plan_report(group(judgement=judge(failing(), TargetFacts(), force=True)))
    assert isinstance(report, PlacementLaunchReport)
    assert report.action == "dry-run" and report.restart_needed
    assert [(m.name, m.role, m.rank) for m in report.members] == [
        ("lab-ct1", "head", 0),
        ("lab-ct2", "worker", 1),
    ]
    assert report.drafter_validation == "errors (forced)" and report.forced
    assert report.drafter_findings == ["error: mask_token_id: expected 151669, found 0"]
    assert all(f.action == "create" for f in report.files)
    assert report.engine_venv and report.engine_venv[0].startswith("lab-ct1: ")


def test_a_restart_plans_the_deployed_files_again() -> None:
    manifest = group().head.manifest.model_copy(update={"pid": 4242})
    plan = plan_restart(facts(HEAD.name, HEAD.address, running=True), manifest, "sk-test")
    assert plan.kind == "restart" and plan.restart and plan.judgement is None
    assert plan.head.uploads == [] and plan.head.venv_plan.empty
    assert plan.head.manifest is manifest
    assert plan.reason == "restart asked (running)"


def test_the_file_facts_parse_what_the_script_prints() -> None:
    paths = launch_paths(DEFAULT_LAYOUT)
    assert len(sha_script(paths).splitlines()) == len(paths)
    output = "\n".join(["- -"] * (len(paths) - 1) + ["a" * 64 + " 644"])
    parsed = parse_shas(paths, output)
    assert parsed[paths[-1]] == ("a" * 64, 0o644)
    assert all(parsed[p] is None for p in paths[:-1])
