"""Plans from canned facts: which files change, whether to restart, the engine venv steps, and
the parsers of the probes' output."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from dflashops.deployment.manifest import DeployedFile, DeployedManifest
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import LocalWheel
from dflashops.launch.lifecycle import RunState, parse_state, parse_watch
from dflashops.launch.plan import decide, file_changes, spec_diff
from dflashops.launch.render import RenderInputs, render, venv_python
from dflashops.launch.status import parse_status
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Engine
from tests.support.manifests import deployed_manifest

REPO = Path(__file__).resolve().parents[2]
BOOK = load_playbook(REPO / "playbooks" / "lab-dflash.yaml")
RENDERED = render(BOOK, RenderInputs(supervisor="fallback", venv_python=venv_python(BOOK)))


def manifest(pid: int | None = 42) -> DeployedManifest:
    return deployed_manifest(
        playbook=BOOK.name,
        files=[DeployedFile(path=f.path, sha256=f.sha256, mode=f.mode) for f in RENDERED.files],
        spec=RENDERED.spec.to_dict(),
        pid=pid,
    )


def state(pid: int | None = 42) -> RunState:
    return RunState(pid, 41 if pid else None, False, False, 10, 100)


def same() -> dict[str, tuple[str, int] | None]:
    return {f.path: (f.sha256, f.mode) for f in RENDERED.files}


def test_nothing_changed_and_running_means_no_restart() -> None:
    changes = file_changes(RENDERED, same())
    assert {c.action for c in changes} == {"same"}
    decision = decide(changes, state(), manifest())
    assert not decision.restart
    assert decision.reason == "files unchanged and the server is running"


def test_changed_created_and_mode_only_files() -> None:
    remote = same()
    spec, script, supervisor = RENDERED.paths
    remote[spec] = ("0" * 64, 0o644)
    remote[script] = (RENDERED.file(script).sha256, 0o644)  # mode differs
    remote[supervisor] = None
    actions = {c.path: c.action for c in file_changes(RENDERED, remote)}
    assert actions == {spec: "update", script: "update", supervisor: "create"}
    decision = decide(file_changes(RENDERED, remote), state(), manifest())
    assert decision.restart and decision.reason.startswith("changed: ")


@pytest.mark.parametrize(
    ("run", "deployed", "reason"),
    [
        (state(None), manifest(), "the server is not running"),
        (state(), None, "no deployment manifest"),
    ],
)
def test_restart_when_not_serving(
    run: RunState, deployed: DeployedManifest | None, reason: str
) -> None:
    decision = decide(file_changes(RENDERED, same()), run, deployed)
    assert decision.restart and decision.reason == reason


def test_spec_diff_names_changed_keys_and_arguments() -> None:
    old = RENDERED.spec.to_dict()
    new = json.loads(json.dumps(old))
    new["num_speculative_tokens"] = 6
    new["argv"] = [
        a.replace('"num_speculative_tokens":4', '"num_speculative_tokens":6') for a in new["argv"]
    ]
    lines = spec_diff(old, new)
    assert lines[0].startswith("argv: -['{")
    assert lines[1] == "num_speculative_tokens: 4 -> 6"
    assert spec_diff(None, new) == []


def test_manifest_round_trip_and_refusal() -> None:
    m = manifest()
    assert DeployedManifest.from_text(m.to_bytes().decode()) == m
    with pytest.raises(Exception, match="not a dflashops manifest"):
        DeployedManifest.from_text('{"playbook": 1}')


# --------------------------------------------------------------------------- probe parsers


def test_parse_state() -> None:
    out = "supervisor 41\nserver 42\nsystemd\nunit-active\nevents 17\nlog 2048\n"
    assert parse_state(out) == RunState(42, 41, True, True, 17, 2048)
    empty = parse_state("events 0\nlog 0\n")
    assert not empty.running and empty.server_pid is None


def test_parse_watch() -> None:
    alive = parse_watch("alive\nlog INFO: Application startup complete.\n")
    assert alive.alive and alive.exit_code is None
    assert alive.log_line == "INFO: Application startup complete."
    dead = parse_watch("event exit 17 1796223928\nlog dflashops-server: engine: nope\n")
    assert not dead.alive and dead.exit_code == 17
    assert parse_watch("event gaveup 1\n").exit_code == -1
    assert parse_watch("event exit ? 1\n").exit_code == -1


def test_parse_status_takes_the_running_command_line_as_truth() -> None:
    m = manifest(pid=42)
    argv = RENDERED.spec.argv[:]
    i = argv.index("--speculative-config")
    argv[i + 1] = json.dumps({"method": "dflash", "num_speculative_tokens": 2, "model": "/d"})
    cmdline = base64.b64encode("\n".join([*argv, ""]).encode()).decode()
    out = (
        f"pid 42\nsupervisor 41\ncmdline {cmdline}\nuptime 75\n"
        "listen 00000000:7530\nlisten 0100007F:1F90\n"
        f"--dflashops-manifest--\n{m.to_bytes().decode()}"
    )
    status = parse_status(out, "10.0.0.1")
    assert status.running and status.pid == 42 and status.uptime_s == 75
    assert status.method == "dflash" and status.num_speculative_tokens == 2
    assert status.port == 30000 and status.listening  # 0x7530
    assert status.endpoint == m.endpoint and status.engine_version == "0.32.0"
    assert status.started_at == m.started_at


def test_parse_status_without_a_server_or_manifest() -> None:
    status = parse_status("", "h")
    assert not status.running and not status.deployed and status.endpoint is None
    broken = parse_status("--dflashops-manifest--\n{not json", "h")
    assert broken.problem is not None and "not a dflashops manifest" in broken.problem


# --------------------------------------------------------------------------- engine venv

WHEEL = LocalWheel(Path("/w/dflashops-0.1.0-py3-none-any.whl"), "b" * 64, "0.1.0")
BASE = "/opt/lab/venv-vllm-cpu"
PURELIB = f"{BASE}/lib/python3.11/site-packages"


def wanted(base: str | None = BASE) -> engine_venv.VenvWanted:
    return engine_venv.VenvWanted(Engine(name="vllm", version="0.32.0", base_venv=base), WHEEL)


def py(purelib: str, engine: str | None, dflashops: str | None = None) -> str:
    data = {"purelib": purelib, "python": "3.11.7", "engine": engine, "dflashops": dflashops}
    return json.dumps({**data, "pip": True})


def test_thin_venv_from_nothing() -> None:
    facts = engine_venv.parse_facts(
        wanted(), f"venv null\nmarker null\npth\npython3 1\nbase {py(PURELIB, '0.32.0+cpu')}\n"
    )
    plan = engine_venv.plan(facts, wanted())
    assert [a.kind for a in plan.actions] == ["create", "link-base", "push-wheel", "install-wheel"]
    assert plan.actions[1].detail.endswith(PURELIB)


def test_ready_venv_is_a_noop_and_a_new_wheel_only_reinstalls() -> None:
    venv = py("/opt/dflashops/venv-vllm-0.32.0/lib/python3.11/site-packages", "0.32.0+cpu", "0.1.0")
    marker = json.dumps({"sha256": WHEEL.sha256, "version": "0.1.0"})
    base = py(PURELIB, "0.32.0+cpu")
    out = f"venv {venv}\nmarker {marker}\npth {PURELIB}\npython3 1\nbase {base}\n"
    plan = engine_venv.plan(engine_venv.parse_facts(wanted(), out), wanted())
    assert plan.empty and plan.noop_reason is not None and "ready" in plan.noop_reason
    stale = out.replace(WHEEL.sha256, "c" * 64)
    facts = engine_venv.parse_facts(wanted(), stale)
    assert [a.kind for a in engine_venv.plan(facts, wanted()).actions] == [
        "push-wheel",
        "install-wheel",
    ]
    with pytest.raises(engine_venv.EngineVenvError, match=r"this CLI is 0\.1\.0"):
        engine_venv.check_ready(facts, wanted())


def test_base_venv_must_exist_and_hold_the_pinned_engine() -> None:
    missing = engine_venv.parse_facts(wanted(), "venv null\nmarker null\npth\nbase null\n")
    with pytest.raises(engine_venv.EngineVenvError, match="no working bin/python"):
        engine_venv.plan(missing, wanted())
    other = engine_venv.parse_facts(
        wanted(), f"venv null\nmarker null\npth\nbase {py(PURELIB, '0.31.0')}\n"
    )
    with pytest.raises(engine_venv.EngineVenvError, match=r"has vllm 0.31.0, the playbook pins"):
        engine_venv.plan(other, wanted())


def test_real_deployment_installs_the_engine() -> None:
    facts = engine_venv.parse_facts(wanted(None), "venv null\nmarker null\npth\npython3 1\n")
    plan = engine_venv.plan(facts, wanted(None))
    assert [a.kind for a in plan.actions] == [
        "create",
        "install-engine",
        "push-wheel",
        "install-wheel",
    ]
    assert plan.actions[1].detail == "pip install vllm==0.32.0"
    sglang = engine_venv.VenvWanted(Engine(name="sglang", version="0.5.23"), WHEEL)
    assert sglang.requirement == "sglang[all]==0.5.23"
    assert sglang.venv == "/opt/dflashops/venv-sglang-0.5.23"
    assert sglang.remote_wheel == f"/opt/dflashops/wheels/{'b' * 16}/{WHEEL.filename}"
