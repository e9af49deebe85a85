"""Issue 21, `doctor` on the lab: the incident's guessed drafter config served with
`launch --force` is ranked first as a drafter config mismatch naming its three keys; after
`drafter push` and a relaunch that finding is gone. Then the other rules the lab can produce
without another launch: a workload asking for thinking the drafter was not trained with, a
running server that is not the deployed one (drift), and no server at all. Two server launches,
real vLLM CPU."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dflashops.deployment.access import connect
from dflashops.deployment.manifest import read_manifest, write_manifest
from dflashops.doctor.core import DoctorRequest, doctor
from dflashops.drafter.push import push_drafter_config
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab import incident
from dflashops.launch.control import stop_server
from dflashops.launch.core import launch
from dflashops.playbook.load import load_playbook, resolve_playbook_path
from dflashops.proxmox.apply import provision
from tests.support.lab import isolated_lab_env, require_lab, run_cli
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = [pytest.mark.root, pytest.mark.vllm, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Inventory, dict[str, str]]]:
    require_lab()
    runtime_or_skip()
    env = isolated_lab_env(tmp_path_factory.mktemp("doctorlab"), tag="dr", cidr="10.200.21.0/24")
    run_cli(env, "lab", "down", check=False)
    with VllmSlot():
        status = json.loads(run_cli(env, "lab", "up", "--json").stdout)
        try:
            env["DFLASHOPS_INVENTORY"] = status["inventory"]
            inventory = load_inventory(Path(status["inventory"]))
            report = provision(inventory, ["lab-ct1"])
            assert report.ok, report.failures
            yield inventory, env
        finally:
            run_cli(env, "lab", "down", check=False, timeout=180)


def test_doctor_ranks_the_guessed_config_first_then_clears_it(
    lab: tuple[Inventory, dict[str, str]], tmp_path: Path
) -> None:
    inventory, env = lab
    started = time.monotonic()
    book_path = incident.incident_playbook(
        resolve_playbook_path("lab-dflash"), tmp_path / "incident.yaml"
    )
    incident.stage_guessed_drafter(inventory, "lab-ct1")
    book = load_playbook(book_path)
    launch(inventory, "lab-ct1", book, force=True)

    # through the CLI: one JSON document, exit 1 for findings
    done = run_cli(
        env, "doctor", "lab-ct1", "-p", str(book_path), "--json", check=False, timeout=300
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    first = report["findings"][0]
    assert first["rule"] == "drafter-config" and first["severity"] == "critical", first
    shown = "\n".join(first["evidence"])
    for key in ("layer_types", "target_layer_ids", "mask_token_id"):
        assert key in shown, (key, shown)
    assert first["fix"].startswith("dflashops drafter push lab-ct1")
    assert report["measured"]["per_position_acceptance"][0] < 0.2
    assert report["measured"]["num_drafts"] >= 20
    # the method's drafter check, run again on the served files, says why launch refused them
    (check,) = [f for f in report["findings"] if f["rule"] == "drafter-check"]
    assert check["severity"] == "critical" and check["evidence"][0].startswith("error: "), check
    assert "dflashops drafter check lab-ct1:" in check["fix"] and "--method dflash" in check["fix"]
    # the broken drafter is not "tuned": its curve is noise until the config is fixed
    assert not [f for f in report["findings"] if f["rule"] == "tune"]
    # the human table through a pipe: ranked rows, keys and the fixing command unbroken
    human = run_cli(env, "doctor", "lab-ct1", "-p", str(book_path), check=False, timeout=300)
    assert human.returncode == 1, human.stderr
    # a pipe lays the table out to 120 columns: a cell wraps at spaces, read down its column
    rows = [line.split("│")[1:-1] for line in human.stdout.splitlines() if line.startswith("│")]
    first_rows = rows[: next((i for i, r in enumerate(rows[1:], 1) if r[0].strip()), len(rows))]
    assert first_rows[0][1].strip() == "critical"
    assert "drafter config mismatch" in " ".join(r[2].strip() for r in first_rows)
    fix = " ".join(r[4].strip() for r in first_rows if r[4].strip())
    assert fix.startswith("dflashops drafter push lab-ct1"), fix
    print(human.stdout)
    guessed_s = time.monotonic() - started

    push_drafter_config(inventory, "lab-ct1", book)
    launch(inventory, "lab-ct1", book)
    after = doctor(inventory, DoctorRequest("lab-ct1"), playbook=book)
    assert not [f for f in after.findings if f.rule == "drafter-config"], after.findings
    assert after.measured["per_position_acceptance"][0] >= 0.3, after.measured
    checks = {c.rule: c.outcome for c in after.checks}
    assert checks["drafter-config"] == "ok" and checks["server"] == "ok", after.checks
    assert checks["drafter-check"] == "ok", after.checks

    # the rules below need no acceptance numbers: one short scrape window, no probe
    quick = DoctorRequest("lab-ct1", window_s=1.0, probe=False)

    # thinking on, against a drafter whose registry entry says it was trained with it off
    thinking = load_playbook(book_path, ["bench.thinking=true"])
    asked = doctor(inventory, quick, playbook=thinking)
    (mode,) = [f for f in asked.findings if f.rule == "thinking-mode"]
    assert "workload thinking on, drafter trained with thinking off" in mode.title, mode

    # the running server is not the deployed one: deployed.json says another max-model-len
    with connect(inventory, "lab-ct1") as conn:
        deployed = read_manifest(conn)
        assert deployed is not None
        argv = list(deployed.spec["argv"])
        at = argv.index("--max-model-len") + 1
        argv[at] = str(int(argv[at]) * 2)
        write_manifest(conn, deployed.model_copy(update={"spec": {**deployed.spec, "argv": argv}}))
        try:
            drifted = doctor(inventory, quick, playbook=book)
        finally:
            write_manifest(conn, deployed)
    (drift,) = [f for f in drifted.findings if f.rule == "drift"]
    assert any(line.startswith("--max-model-len: running ") for line in drift.evidence), drift

    # no server at all: the first finding says so and names the command that starts one
    stop_server(inventory, "lab-ct1")
    gone = doctor(inventory, quick, playbook=book)
    assert gone.findings[0].rule == "server" and gone.findings[0].severity == "critical"
    assert gone.findings[0].fix == "dflashops launch lab-ct1"
    print(  # the test's own timing, for the report (-s shows it)
        f"doctor lab: guessed part {guessed_s:.0f} s, total {time.monotonic() - started:.0f} s; "
        f"after push: {after.measured}"
    )
