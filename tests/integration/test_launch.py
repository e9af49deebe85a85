"""``launch`` end to end on an isolated lab, over real SSH, through the rendered files.

Two lab containers: ``lct991`` runs a fake engine (a stdlib HTTP server posing as
``vllm.entrypoints.cli.main``, from a base venv made in the container) that is slow to come up
and can be told to fail, so readiness and rollback are tested in seconds; ``lct990`` runs real
vLLM on the CPU with the lab's DFlash drafter (one server for the whole module, under the
machine-wide vLLM slot), a second identical launch, and a broken drafter that makes vLLM fail
for real and is rolled back.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dflashops.deployment.layout import DEFAULT_LAYOUT
from dflashops.lab.mounts import venv_base_prefix
from dflashops.launch.control import follow_logs, read_logs, restart_server, stop_server
from dflashops.launch.core import launch
from dflashops.launch.report import LaunchFailed
from dflashops.launch.status import server_status
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from tests.support.fake_engine import FAKE_RECORD, FAKE_VENV, fake_playbook, install_fake_engine
from tests.support.lab import require_lab, run_cli
from tests.support.launch_lab import Lab, containers_lab
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = pytest.mark.root

CIDR = "10.200.11.0/24"
REAL, FAKE = "lct990", "lct991"
ADDRESSES = {REAL: (990, "10.200.11.30"), FAKE: (991, "10.200.11.31")}
# the container's hostname does not resolve there; without this, Gloo waits 2 min for DNS
LAB_OVERRIDES = ("server.env.GLOO_SOCKET_IFNAME=lo",)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_lab()
    runtime_or_skip()  # the lab mounts the runtime's base Python, which the containers need
    workdir = tmp_path_factory.mktemp("launchlab")
    # bridge dfolabl0, node dfo-nodel
    with containers_lab(workdir, tag="l", cidr=CIDR, containers=ADDRESSES) as lab:
        yield lab


# --------------------------------------------------------------------------- the fake engine


@pytest.fixture(scope="module")
def fake(lab: Lab) -> Path:
    """A base venv in lct991 whose ``vllm`` is the fake engine; returns its playbook file."""
    runtime = runtime_or_skip()
    base = venv_base_prefix(runtime.venv)
    assert base is not None
    with lab.conn(FAKE) as conn:
        install_fake_engine(conn, f"{base}/bin/python3")
    return fake_playbook(lab.workdir / "fake-slow.yaml", FAKE)


def fake_book(path: Path, *overrides: str) -> Playbook:
    return load_playbook(path, overrides)


def records(lab: Lab) -> list[dict[str, Any]]:
    with lab.conn(FAKE) as conn:
        out = conn.run(f"cat {FAKE_RECORD} 2>/dev/null", ok_codes=None).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_fake_slow_engine_is_ready_only_after_the_probe_succeeds(lab: Lab, fake: Path) -> None:
    seen: list[str] = []
    report = launch(lab.inventory, FAKE, fake_book(fake), progress=seen.append, timeout_s=120)
    returned = time.time()
    assert report.action == "started"
    assert report.endpoint == f"http://{lab.address(FAKE)}:30000/v1"
    assert report.engine_venv[:2] == [
        f"create: thin venv /opt/dflashops/venv-vllm-0.32.0 with {FAKE_VENV}/bin/python",
        f"link-base: dflashops-base-venv.pth -> {FAKE_VENV}/lib/python3.11/site-packages",
    ]
    # phases in order, and the completion gate held the launch back for seconds
    phases = report.phases
    # (the fake lists its model as soon as /health is 200: "healthy" and "listed" coincide)
    assert phases["loading"] < phases["listed"] < phases["ready"]
    events = records(lab)
    first_ok = next(r["t"] for r in events if r["what"] == "completion 200")
    first_health = next(r["t"] for r in events if r["what"] == "health 200")
    assert first_health < first_ok
    # /health was 200 and the completion still failed: launch went on waiting
    refused = [r["t"] for r in events if r["what"] == "completion 503"]
    assert refused and first_health <= refused[0] < first_ok
    assert returned >= first_ok
    assert any("listed, waiting for a 1-token completion" in s for s in seen)
    assert any("fake engine: serving" in s for s in seen)  # the log line shown while loading

    with lab.conn(FAKE) as conn:
        status = server_status(conn)
    assert status.running and status.pid == report.pid and status.listening
    assert status.method == "none" and status.served_model_name == "fake"
    assert status.endpoint == report.endpoint and status.supervisor == "fallback"
    assert status.uptime_s is not None and status.uptime_s >= 5


def test_identical_launch_changes_nothing(lab: Lab, fake: Path) -> None:
    before = launch(lab.inventory, FAKE, fake_book(fake), dry_run=True)
    assert before.action == "dry-run"
    assert {f.action for f in before.files} == {"same"}
    assert not before.restart_needed and before.reason.startswith("files unchanged")
    changed = launch(lab.inventory, FAKE, fake_book(fake, "server.port=30001"), dry_run=True)
    assert changed.restart_needed
    assert {f.path: f.action for f in changed.files if f.action != "same"} == {
        DEFAULT_LAYOUT.spec: "update",
        DEFAULT_LAYOUT.launch_script: "update",
    }
    assert '-    "30000",\n+    "30001",' in changed.diffs[DEFAULT_LAYOUT.spec]
    assert "argv: -['30000'] +['30001']" in changed.spec_changes
    report = launch(lab.inventory, FAKE, fake_book(fake), timeout_s=120)
    assert report.action == "unchanged"
    with lab.conn(FAKE) as conn:
        assert server_status(conn).pid == report.pid


def test_failing_engine_is_rolled_back_and_the_previous_serves(lab: Lab, fake: Path) -> None:
    with lab.conn(FAKE) as conn:
        old = server_status(conn)
        old_spec = conn.run(f"sha256sum < {DEFAULT_LAYOUT.spec}").stdout.split()[0]
    book = fake_book(fake, "server.env.FAKE_FAIL=port")
    with pytest.raises(LaunchFailed) as failed:
        launch(lab.inventory, FAKE, book, timeout_s=120)
    error = failed.value
    assert error.cause is not None and error.cause.code == "port-in-use"
    assert error.rolled_back and error.previous_serving is True
    assert "OSError: [Errno 98] Address already in use" in error.log_tail
    assert "rolled back; the previous server serves again" in error.message
    with lab.conn(FAKE) as conn:
        now = server_status(conn)
        spec = conn.run(f"sha256sum < {DEFAULT_LAYOUT.spec}").stdout.split()[0]
    assert spec == old_spec  # the previous files are back
    assert now.running and now.pid != old.pid  # restarted from them
    response = httpx.get(f"{old.endpoint}/models", timeout=10)
    assert response.status_code == 200 and response.json()["data"][0]["id"] == "fake"


def test_stop_restart_logs_through_the_cli(lab: Lab, fake: Path) -> None:
    env = {**os.environ, "DFLASHOPS_INVENTORY": str(lab.inventory_path)}
    with lab.conn(FAKE) as conn:
        old_pid = server_status(conn).pid
    restarted = json.loads(run_cli(env, "restart", FAKE, "--json").stdout)
    assert restarted["pid"] != old_pid
    logs = read_logs(lab.inventory, FAKE, lines=200)
    assert "fake engine: serving" in logs
    chunks: list[str] = []
    follow = follow_logs(
        lab.inventory, FAKE, lines=1, poll_s=0.2, should_stop=lambda: len(chunks) >= 2
    )
    for chunk in follow:
        chunks.append(chunk)
        if len(chunks) == 1:
            with lab.conn(FAKE) as conn:
                conn.run(f"echo followed-line >> {DEFAULT_LAYOUT.log}")
    assert chunks[1] == "followed-line\n"
    cli_logs = run_cli(env, "logs", FAKE, "-n", "3").stdout
    assert len(cli_logs.splitlines()) == 3
    stopped = json.loads(run_cli(env, "stop", FAKE, "--json").stdout)
    assert stopped == {
        "container": FAKE,
        "was_running": True,
        "pid": restarted["pid"],
        "members": [],  # one container, no placement
        "note": None,
    }
    with lab.conn(FAKE) as conn:
        status = server_status(conn)
    assert not status.running and status.deployed and not status.listening
    assert stop_server(lab.inventory, FAKE).was_running is False
    # files unchanged, server stopped: launch starts it again
    again = json.loads(run_cli(env, "launch", FAKE, "-p", str(fake), "--json").stdout)
    assert again["action"] == "started" and again["reason"] == "the server is not running"
    assert restart_server(lab.inventory, FAKE, timeout_s=120).pid != again["pid"]


# --------------------------------------------------------------------------- real vLLM


@pytest.fixture(scope="module")
def vllm_slot(lab: Lab) -> Iterator[None]:
    """The machine-wide vLLM slot while lct990 may run a server; stopped before it is freed."""
    slot = VllmSlot()
    slot.acquire()
    try:
        yield
    finally:
        try:
            stop_server(lab.inventory, REAL)
        finally:
            slot.release()


def lab_launch(
    lab: Lab,
    *overrides: str,
    flags: tuple[str, ...] = (),
    timeout: float = 400,
    playbook: str = "lab-dflash",
) -> subprocess.CompletedProcess[str]:
    """``dflashops launch lct990 -p PLAYBOOK`` with the lab overrides."""
    sets = [item for o in (*LAB_OVERRIDES, *overrides) for item in ("--set", o)]
    env = {**os.environ, "DFLASHOPS_INVENTORY": str(lab.inventory_path)}
    return run_cli(env, "launch", REAL, "-p", playbook, *sets, *flags, timeout=timeout, check=False)


def complete(endpoint: str) -> dict[str, Any]:
    response = httpx.post(
        f"{endpoint}/completions",
        json={"model": "tiny", "prompt": "def foo(x):", "max_tokens": 8, "temperature": 0},
        timeout=60,
    )
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_real_vllm_dflash_launch_and_identical_relaunch(lab: Lab, vllm_slot: None) -> None:
    done = lab_launch(lab, flags=("--json",))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["action"] == "started" and report["drafter_validation"] == "clean"
    endpoint = f"http://{lab.address(REAL)}:30000/v1"
    assert report["endpoint"] == endpoint
    assert report["phases"]["loading"] < report["phases"]["ready"]
    assert complete(endpoint)["choices"][0]["text"]
    with lab.conn(REAL) as conn:
        status = server_status(conn)
    assert status.running and status.pid == report["pid"] and status.listening
    assert status.engine_version == "0.32.0" and status.method == "dflash"
    assert status.speculative_config == {
        "method": "dflash",
        "model": "/opt/lab/models/tiny-qwen3-dflash",
        "num_speculative_tokens": 4,
    }

    again = lab_launch(lab, flags=("--json",))
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["action"] == "unchanged" and second["pid"] == report["pid"]


@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_real_vllm_broken_drafter_is_rolled_back(lab: Lab, vllm_slot: None) -> None:
    with lab.conn(REAL) as conn:
        before = server_status(conn)
        if not before.running:  # run alone: bring the good server up first
            assert lab_launch(lab).returncode == 0
            before = server_status(conn)
        # fc.weight stays [128, 3 x 128]; the config now claims two target layers
        conn.run(
            "rm -rf /srv/broken-dflash && "
            "cp -r /opt/lab/models/tiny-qwen3-dflash /srv/broken-dflash && "
            'python3 -c \'import json; p="/srv/broken-dflash/config.json"; c=json.load(open(p)); '
            'c["aux_hidden_state_layer_ids"]=[1, 2]; json.dump(c, open(p, "w"))\''
        )  # the speculators layout the lab drafter is exported in: target layers 0 and 1
    broken = "drafter.model.path=/srv/broken-dflash"

    refused = lab_launch(lab, broken, timeout=120)
    assert refused.returncode == 1
    # the fc width (and, against the lab registry entry, the ids) are named
    assert "drafter check found" in refused.stderr
    assert "fc.weight: expected" in refused.stderr
    with lab.conn(REAL) as conn:
        assert server_status(conn).pid == before.pid  # nothing touched

    done = lab_launch(lab, broken, flags=("--force",))
    assert done.returncode == 1, done.stderr
    assert "warning: --force: LAUNCHING OVER" in done.stderr
    assert "cause: drafter/target hidden-feature mismatch" in done.stderr
    assert "Tried to load weights of size torch.Size([128, 384])" in done.stderr
    assert f"rolled back; the previous server serves again at {before.endpoint}" in done.stderr

    with lab.conn(REAL) as conn:
        after = server_status(conn)
    assert after.running and after.pid != before.pid
    assert after.speculative_config == before.speculative_config  # the good drafter again
    assert complete(str(before.endpoint))["choices"][0]["text"]


@pytest.mark.vllm
@pytest.mark.timeout(600)
def test_real_vllm_draft_model_is_launched_through_its_family_s_check(
    lab: Lab, vllm_slot: None
) -> None:
    """The lab's decaying draft model (``lab-decay``) goes through the draft-model rules: a
    copy whose vocabulary is not the target's is refused before anything changes; the real
    one serves and drafts."""
    with lab.conn(REAL) as conn:
        before = server_status(conn)
        conn.run(
            "rm -rf /srv/other-vocab && "
            "cp -r /opt/lab/models/tiny-qwen3-draft-decay /srv/other-vocab && "
            'python3 -c \'import json; p="/srv/other-vocab/config.json"; c=json.load(open(p)); '
            'c["vocab_size"] += 64; json.dump(c, open(p, "w"))\''
        )
    refused = lab_launch(lab, "drafter.model.path=/srv/other-vocab", playbook="lab-decay")
    assert refused.returncode == 1
    assert "drafter check found" in refused.stderr and "vocab_size" in refused.stderr
    with lab.conn(REAL) as conn:
        assert server_status(conn).pid == before.pid  # nothing touched

    done = lab_launch(lab, flags=("--json",), playbook="lab-decay")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["drafter_validation"] in ("clean", "warnings"), report["drafter_findings"]
    assert not [f for f in report["drafter_findings"] if f.startswith("error")]
    with lab.conn(REAL) as conn:
        status = server_status(conn)
    assert status.running and status.method == "draft_model"
    assert complete(f"http://{lab.address(REAL)}:30000/v1")["choices"][0]["text"]
