"""README's main job: `dflashops lab demo` on an isolated lab replays the incident on real vLLM
CPU servers, built on `dflashops up` over two pairs (lab-ct1, lab-ct2) run in parallel: the
trained DFlash drafter with a guessed config is refused by up's drafter step, forced and measured
collapsing, corrected by --fix-drafter and measured drafting, tuned live, and the server is left
at k*; lab-ct2 fails on purpose before its launch (one vLLM server at a time on 2 cores).

The same lab then checks `up` itself, end to end (folded in here: one lab, one server): a dry
run changes nothing; a rerun leaves the finished pair alone and resumes only the failed one; an
interrupted `up` stops after the step in progress and the next one continues there; a second
demo replays the incident again and reuses k* for the same drafter."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dflashops.bench.models import BenchReport
from tests.support.lab import isolated_lab_env, require_lab, run_cli
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = [pytest.mark.root, pytest.mark.vllm, pytest.mark.timeout(1800)]
CT1, CT2 = "lab-ct1", "lab-ct2"
# `python -m dflashops.cli` as a terminal starts it: a runner started in the background passes
# SIGINT on ignored, and Python then never raises KeyboardInterrupt
WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'dflashops'; runpy.run_module('dflashops.cli', run_name='__main__')"
)


@pytest.fixture(scope="module")
def demo_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_lab()
    runtime_or_skip()
    env = isolated_lab_env(tmp_path_factory.mktemp("demo"), tag="d", cidr="10.200.12.0/24")
    run_cli(env, "lab", "down", check=False)
    with VllmSlot():
        yield env
        run_cli(env, "lab", "down", check=False, timeout=180)


def result_of(demo: dict[str, Any], run: str, container: str, step: str) -> str:
    found = [
        row["result"]
        for row in demo["stages"]
        if row["run"].startswith(run) and row["container"] == container and row["step"] == step
    ]
    assert len(found) == 1, (run, container, step, demo["stages"])
    return str(found[0])


def steps_run(demo: dict[str, Any], container: str) -> set[str]:
    return {row["step"] for row in demo["stages"] if row["container"] == container}


def pair(doc: dict[str, Any], container: str) -> dict[str, Any]:
    return next(p for p in doc["pairs"] if p["container"] == container)


def test_demo_replays_the_incident_on_up_and_up_resumes(demo_env: dict[str, str]) -> None:
    first = json.loads(run_cli(demo_env, "lab", "demo", "--json", timeout=1080).stdout)
    # run 0: both containers created, one on each PVE node
    assert result_of(first, "0", CT1, "provision") == "create"
    assert result_of(first, "0", CT2, "provision") == "create"

    # run 1, the incident: up's drafter step refuses the guessed config, naming its three keys
    assert result_of(first, "1", CT1, "drafter").startswith("drafter check found 3 error(s)")
    refused = " ".join(first["refused_keys"])
    for key in ("layer_types", "aux_hidden_state_layer_ids", "mask_token_id"):
        assert key in refused, first["refused_keys"]
    # lab-ct2 fails on purpose before any launch, in every run (one vLLM server at a time)
    assert "cannot read /srv/lab-demo" in first["second_pair"]
    assert steps_run(first, CT2) == {"provision", "drafter"}

    # run 2: served anyway with --force, it collapses
    assert result_of(first, "2", CT1, "launch").startswith("started: http://10.200.12.10:30000")
    guessed = first["acceptance"]["guessed"]
    corrected = first["acceptance"]["corrected"]
    assert guessed["spec_decode_acceptance_length"] <= 1.2

    # run 3: --fix-drafter pushes exactly those keys; the corrected drafter really drafts
    assert len(first["pushed_keys"]) == 3
    assert result_of(first, "3", CT1, "drafter").startswith("pushed ")
    assert corrected["spec_decode_acceptance_length"] >= 1.8
    assert corrected["per_position_acceptance"][0] >= 0.5
    assert corrected["output_throughput"] > guessed["output_throughput"]
    assert first["first_reply"] and first["spec_decode"]["num_drafts"] > 0

    tune = first["tune"]
    assert result_of(first, "3", CT1, "tune").startswith(f"k*={tune['best_k']}: ")
    assert tune["best_k"] >= 2 and tune["tuned_earlier"] is False
    assert tune["start_k"] == 4 and tune["launches"][0] == 4 and len(tune["launches"]) <= 4
    tuned = Path(tune["playbook"])
    assert tuned.name == "playbook.tuned.yaml" and first["playbook"] == str(tuned)
    assert f"num_speculative_tokens: {tune['best_k']}" in tuned.read_text()
    assert BenchReport.load(Path(tune["report"])).tune is not None
    assert first["acceptance"]["tuned"]["k"] == tune["best_k"]
    # the report step's run folder: JSON, PNGs, a Markdown summary
    folder = Path(first["run_folder"])
    assert (folder / "record.json").is_file() and list((folder / "plots").glob("*.png"))
    summary = (folder / "summary.md").read_text()
    assert f"k={tune['best_k']}" in summary and "| tune | ok |" in summary

    endpoint = first["endpoint"]
    with httpx.Client(timeout=60) as client:
        reply = client.post(
            f"{endpoint}/chat/completions",
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 8,
            },
        )
        assert reply.status_code == 200
    status = json.loads(run_cli(demo_env, "lab", "status", "--json").stdout)
    assert [s["method"] for s in status["servers"]] == ["dflash"]
    assert [s["num_speculative_tokens"] for s in status["servers"]] == [tune["best_k"]]

    up_env = {**demo_env, "DFLASHOPS_UP_STATE": first["up_state"]}
    up = ["-i", first["inventory"], "up", first["playbook_file"], "-c", CT1, "-c", CT2]
    records = sorted(Path(first["up_state"]).glob("*/record.json"))
    assert len(records) == 2
    before = [r.read_bytes() for r in records]

    # --dry-run: each pair's plan and why; nothing changes
    dry = json.loads(run_cli(up_env, *up, "--dry-run", "--json").stdout)
    assert {p["action"] for p in pair(dry, CT1)["plan"]} == {"skip"}
    plan2 = {p["step"]: p for p in pair(dry, CT2)["plan"]}
    assert plan2["provision"]["action"] == "skip"
    assert plan2["drafter"]["reason"].startswith("failed last time: ")
    assert [r.read_bytes() for r in records] == before

    # a rerun: the finished pair changes nothing (one line), only the failed one resumes
    done = run_cli(up_env, *up, "--json", check=False)
    assert done.returncode == 1, done.stderr
    rerun = json.loads(done.stdout)
    assert pair(rerun, CT1)["outcome"] == "unchanged" and pair(rerun, CT1)["ran"] == []
    assert "nothing to do" in pair(rerun, CT1)["line"]
    assert pair(rerun, CT2)["ran"] == ["drafter"] and pair(rerun, CT2)["outcome"] == "failed"
    assert records[0].read_bytes() == before[0]  # lab-ct1's record untouched

    # Ctrl-C during bench: bench finishes, up stops before tune; the next up continues there
    ct1_up = ["-i", first["inventory"], "up", first["playbook_file"], "-c", CT1, "--json"]
    record1 = next(r for r in records if r.parent.name.endswith(CT1))
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", WITH_CTRL_C, *ct1_up, "--from", "bench"],
        env=up_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        while json.loads(record1.read_text())["steps"]["bench"]["status"] != "running":
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() - started < 120
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    stopped = json.loads(out)
    assert stopped["interrupted"] is True
    assert pair(stopped, CT1)["outcome"] == "interrupted"
    assert pair(stopped, CT1)["ran"] == ["bench"]
    steps = json.loads(record1.read_text())["steps"]
    assert steps["bench"]["status"] == "ok" and steps["tune"]["status"] == "pending"
    resumed = json.loads(run_cli(up_env, *ct1_up, timeout=600).stdout)
    assert pair(resumed, CT1)["ran"] == ["tune", "report"]
    tune_again = pair(resumed, CT1)["record"]["steps"]["tune"]
    assert (
        tune_again["outputs"]["reused"] is True
        and tune_again["outputs"]["best_k"] == tune["best_k"]
    )

    # a second demo replays the incident again and reuses k* tuned for this same drafter
    again = json.loads(run_cli(demo_env, "lab", "demo", "--json", timeout=720).stdout)
    assert result_of(again, "1", CT1, "drafter").startswith("drafter check found 3 error(s)")
    assert len(again["pushed_keys"]) == 3
    assert result_of(again, "3", CT1, "tune").startswith(f"k*={tune['best_k']}, tuned earlier")
    assert "provision" not in steps_run(again, CT1)  # the containers were there: not redone
