"""Issue 20: every command string dflashops builds for a remote or local shell, fed hostile values.

Each test calls the real product function that builds (and usually runs) the command, with every
field a user or a remote host controls set to a payload from ``PAYLOADS`` (quotes, ``$()``,
backticks, ``;``, ``|``, newlines, spaces, globs, leading dashes, unicode). The command runs in
real bash (``tests/support/shell_argv.py``): every command it would run is recorded, not run.
Each test asserts the value reached its command as exactly one, unchanged argument and that
no payload ran (the canary command was never called).

The launch script (``launch.sh``) has its own property test: ``test_templates_shell.py``.
"""

from __future__ import annotations

import hashlib
import posixpath
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from pydantic import ValidationError

from dflashops.bench.roofline import SHARD_INDEX, probe_roofline_facts
from dflashops.bench.server_log import RemoteServerLog
from dflashops.deployment.access import ContainerAccess
from dflashops.deployment.layout import Layout
from dflashops.deployment.managed import ManagedCheck
from dflashops.deployment.manifest import read_manifest
from dflashops.engine import venv as engine_venv
from dflashops.engine.wheel import LocalWheel
from dflashops.errors import TemplateRenderError
from dflashops.inventory.load import Inventory
from dflashops.inventory.models import Container
from dflashops.inventory.models import Mount as CtMount
from dflashops.lab.host_model import Mount as LabMount
from dflashops.lab.node import NodeSpec, node_setup_script
from dflashops.lab.sshd import _mount_commands
from dflashops.launch import control, lifecycle
from dflashops.launch.facts import remote_shas
from dflashops.launch.render import RenderInputs, render
from dflashops.launch.rollback import restore
from dflashops.launch.status import server_status
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Server
from dflashops.proxmox import guest
from dflashops.proxmox.execute import pct_set_script, rewrite_conf_script
from dflashops.proxmox.facts import probe_script
from dflashops.remote import FileUpload, PutResult, RemoteTransferError, put_files, sha256_remote
from dflashops.remote import files as remote_files
from dflashops.training import facts as training_facts
from dflashops.training.inputs import container_dataset
from dflashops.training.job import DataSettings, DrafterShape, TrainingJob
from dflashops.training.remote import StageFailed, StageFiles, poll_script, run_remote_stage
from tests.support.shell_argv import (
    CANARY,
    PAYLOADS,
    SandboxConnection,
    ShellSandbox,
    assert_arrived,
    assert_safe,
)

REPO = Path(__file__).resolve().parents[2]
LAB_PLAYBOOK = REPO / "playbooks" / "lab-dflash.yaml"
IDS = [repr(p)[1:-1][:24] for p in PAYLOADS]


@pytest.fixture(params=PAYLOADS, ids=IDS)
def payload(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def sandbox(tmp_path: Path) -> ShellSandbox:
    return ShellSandbox(tmp_path)


@pytest.fixture
def conn(sandbox: ShellSandbox) -> Iterator[SandboxConnection]:
    connection = SandboxConnection(sandbox)
    yield connection
    assert_safe(sandbox.calls)  # whatever the test checked, no payload ran


@pytest.fixture
def hostile(sandbox: ShellSandbox, payload: str) -> str:
    """An absolute folder (what path validation lets through) whose last name is the payload."""
    return f"{sandbox.root}/{payload.replace('/', '_')}"


def hostile_layout(base: str) -> Layout:
    return Layout(
        etc=f"{base}/etc",
        state=f"{base}/state",
        log_dir=f"{base}/log",
        opt=f"{base}/opt",
        systemd_dir=f"{base}/systemd",
    )


# --------------------------------------------------------------------------- the harness itself


def test_the_harness_catches_an_unquoted_value(sandbox: ShellSandbox) -> None:
    """Without this, every other test here could pass on a harness that records nothing."""
    run = sandbox.run(f"ls $({CANARY}) a b *")
    assert run.commands(CANARY) == [[CANARY]]
    ls = run.commands("ls")
    assert len(ls) == 1 and ls[0][1:] == ["a", "b", "g1", "g2"]
    with pytest.raises(AssertionError):
        assert_arrived(run.calls, "a b")
    with pytest.raises(AssertionError, match="a payload ran"):
        assert_safe(run.calls)


# --------------------------------------------------------------------------- remote/files.py


def test_sha256_remote_path(conn: SandboxConnection, hostile: str) -> None:
    assert sha256_remote(conn, hostile) is None  # absent: the probe's tests ran on the real path
    assert_arrived(conn.sandbox.calls, hostile, command="[")


def test_put_files_probe_commit_and_prune(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str
) -> None:
    """The whole transaction: the probe, the commit script (verify, back up, rename), pruning."""
    target = f"{hostile}/file"
    Path(hostile).mkdir(parents=True, exist_ok=True)
    Path(target).write_bytes(b"old")
    results = put_files(conn, [FileUpload(target, b"new", 0o600)])
    assert results[0].changed and results[0].backup is not None
    calls = sandbox.calls
    assert_arrived(calls, hostile, command="mkdir")
    assert_arrived(calls, target, command="[")
    assert_arrived(calls, target, command="stat")
    temps = [c[-1] for c in sandbox.calls if c[:3] == ["mv", "-fT", "--"]]
    assert len(temps) == 1 and temps[0] == target  # the rename reached the target itself
    assert_arrived(calls, results[0].backup, command="ln")
    assert_arrived(calls, hostile, command="sync")
    stale = [c for c in calls if c[:3] == ["rm", "-f", "--"] and c[3].endswith("*.tmp")]
    assert stale and stale[0][3] == f"{hostile}/.file{remote_files.TEMP_MARK}*.tmp"


def test_commit_of_a_corrupt_upload_names_the_path_in_one_word(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str
) -> None:
    """Issue 20's first bug: this branch once put the path inside single quotes unquoted."""
    target = f"{hostile}/file"
    temp = f"{hostile}/.file.dfo-1.tmp"
    Path(hostile).mkdir(parents=True)
    Path(temp).write_bytes(b"what arrived")
    upload = FileUpload(target, b"what was sent")
    plan = remote_files._Plan(upload, "0" * 64, 13, False, False, False, temp)
    with pytest.raises(RemoteTransferError, match="corrupt"):
        remote_files._commit(conn, [plan], None)
    assert ["echo", f"corrupt {target}"] in sandbox.calls
    assert ["rm", "-f", "--", temp] in sandbox.calls


def test_put_files_chmod_only(conn: SandboxConnection, sandbox: ShellSandbox, hostile: str) -> None:
    target = f"{hostile}/same"
    Path(hostile).mkdir(parents=True, exist_ok=True)
    Path(target).write_bytes(b"same")
    Path(target).chmod(0o600)
    put_files(conn, [FileUpload(target, b"same", 0o644)])
    assert ["chmod", "644", target] in sandbox.calls


def test_prune_backups_glob_stays_under_the_path(sandbox: ShellSandbox, hostile: str) -> None:
    """The pattern is the quoted path plus a fixed glob: only that file's backups can match."""
    target = f"{hostile}/f"
    Path(hostile).mkdir(parents=True, exist_ok=True)
    stamps = [f"2026010{i}T000000.000000Z" for i in range(1, 8)]
    for stamp in stamps:
        Path(f"{target}.{stamp}.bak").touch()
    Path(f"{hostile}/other.20260101T000000.000000Z.bak").touch()
    run = sandbox.run(remote_files._prune_backups(target))
    removed = [c[-1] for c in run.commands("rm")]
    assert removed == [f"{target}.{s}.bak" for s in stamps[:2]]
    assert_safe(run.calls)


def test_restore_after_a_failed_start(conn: SandboxConnection, hostile: str) -> None:
    changed = PutResult("sandbox", f"{hostile}/a", "0" * 64, True, backup=f"{hostile}/a.1.bak")
    created = PutResult("sandbox", f"{hostile}/b", "0" * 64, True, created=True)
    restore(conn, [changed, created])
    calls = conn.sandbox.calls
    temp = f"{hostile}/a.dfo-restore.tmp"
    assert ["cp", "-p", "--", f"{hostile}/a.1.bak", temp] in calls
    assert ["mv", "-fT", "--", temp, f"{hostile}/a"] in calls
    assert ["rm", "-f", "--", f"{hostile}/b"] in calls


# --------------------------------------------------------------------------- launch/


def test_logs_and_follow_under_a_hostile_layout(
    conn: SandboxConnection, hostile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dflashops logs [-f]``: only the connection is swapped (for the sandbox's)."""
    layout = hostile_layout(hostile)
    Path(layout.log_dir).mkdir(parents=True)
    Path(layout.log).write_text("one\ntwo\n")
    ct = Container(name="ct", cluster="c", node="n")
    access = ContainerAccess("ct", ct, "sandbox", conn, ManagedCheck("ct", 100, "pve"))
    monkeypatch.setattr(control, "connect", lambda *_a, **_k: access)
    inventory = cast(Inventory, None)  # only connect() reads it
    assert control.read_logs(inventory, "ct", lines=1, layout=layout) == "two\n"
    polls = iter([False, True])
    followed = control.follow_logs(
        inventory, "ct", lines=5, layout=layout, poll_s=0, should_stop=lambda: next(polls)
    )
    first = next(followed)
    with Path(layout.log).open("a") as log:
        log.write("three\n")
    assert [first, *followed] == ["one\ntwo\n", "three\n"]
    assert ["tail", "-n", "1", layout.log] in conn.sandbox.calls
    assert ["tail", "-c", "+9", layout.log] in conn.sandbox.calls


def test_lifecycle_scripts_under_a_hostile_layout(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str
) -> None:
    layout = hostile_layout(hostile)
    Path(layout.state).mkdir(parents=True)
    Path(layout.events).write_text("start 4242 1\n")
    Path(layout.log).parent.mkdir(parents=True)
    Path(layout.log).write_text("a log line\n")
    sandbox.stub(layout.supervisor)

    state = lifecycle.run_state(conn, layout)
    assert state.events_size == len("start 4242 1\n") and state.log_size == len("a log line\n")
    conn.run(lifecycle.start_script(layout, systemd=False))
    assert lifecycle.wait_start_event(conn, 0, layout) == 4242
    assert lifecycle.log_since(conn, layout, 0) == "a log line\n"
    assert lifecycle.exit_code_since(conn, layout, 0, wait_s=0) is None
    lifecycle.Watcher(conn, layout, 4242, 0, 0)()
    lifecycle.stop(conn, systemd=True, layout=layout, grace_s=0)
    calls = sandbox.calls
    for path in (layout.supervisor_pidfile, layout.pidfile, layout.events, layout.log):
        assert_arrived(calls, path, command="[")
    assert_arrived(calls, layout.state, command="mkdir")
    assert_arrived(calls, layout.log_dir, command="mkdir")
    assert ["setsid", "-f", layout.supervisor] in calls
    assert_arrived(calls, layout.events, command="tail")
    assert_arrived(calls, layout.log, command="tail")
    assert ["rm", "-f", layout.supervisor_pidfile] in calls


def test_status_and_file_hashes_under_a_hostile_layout(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str
) -> None:
    layout = hostile_layout(hostile)
    status = server_status(conn, layout)
    assert not status.running and not status.deployed
    assert_arrived(sandbox.calls, layout.manifest, command="[")
    assert_arrived(sandbox.calls, layout.pidfile, command="[")
    paths = [layout.spec, layout.launch_script]
    assert remote_shas(conn, paths) == {layout.spec: None, layout.launch_script: None}
    for path in paths:
        assert_arrived(sandbox.calls, path, command="[")
    assert read_manifest(conn, layout) is None
    assert_arrived(sandbox.calls, layout.manifest, command="test")


def test_supervise_script_under_a_hostile_layout(sandbox: ShellSandbox, hostile: str) -> None:
    """The fallback supervisor really runs: it starts the launch script, records its exit."""
    layout = hostile_layout(hostile)
    book = load_playbook(LAB_PLAYBOOK)
    rendered = render(book, RenderInputs(supervisor="fallback", venv_python="/x", layout=layout))
    script = next(f for f in rendered.files if f.path == layout.supervisor).content.decode()
    sandbox.stub(layout.launch_script)
    Path(layout.state).mkdir(parents=True)
    run = sandbox.run(script)
    assert_arrived(run.calls, layout.state, command="mkdir")
    assert [layout.launch_script] in run.calls
    assert Path(layout.supervisor_pidfile).read_text().strip().isdigit()
    assert Path(layout.events).read_text().startswith("exit 0 ")
    assert_safe(run.calls)


def test_systemd_unit_refuses_what_it_cannot_hold_safely(hostile: str, payload: str) -> None:
    layout = hostile_layout(hostile)
    book = load_playbook(LAB_PLAYBOOK)
    inputs = RenderInputs(supervisor="systemd", venv_python="/x", layout=layout)
    if all((c.isalnum() and c.isascii()) or c in "_./@:+-" for c in layout.launch_script):
        unit = next(f for f in render(book, inputs).files if f.path == layout.unit)
        assert f"ExecStart={layout.launch_script}\n" in unit.content.decode()
    else:
        with pytest.raises(TemplateRenderError, match="cannot go into a systemd unit"):
            render(book, inputs)


# --------------------------------------------------------------------------- engine/venv.py


def _wanted(sandbox: ShellSandbox, hostile: str) -> engine_venv.VenvWanted:
    book = load_playbook(LAB_PLAYBOOK)
    wheel_file = sandbox.root / "dflashops-9.9.9-py3-none-any.whl"
    wheel_file.write_bytes(b"wheel")
    wheel = LocalWheel(wheel_file, hashlib.sha256(b"wheel").hexdigest(), "9.9.9")
    engine = book.engine.model_copy(update={"base_venv": Path(f"{hostile}/base")})
    return engine_venv.VenvWanted(engine, wheel, hostile_layout(hostile))


def test_engine_venv_probe_create_install(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str
) -> None:
    wanted = _wanted(sandbox, hostile)
    base_python = posixpath.join(str(wanted.engine.base_venv), "bin", "python")
    for python in (wanted.python, base_python):
        sandbox.stub(python)
    facts = engine_venv.probe(conn, wanted)
    steps = engine_venv.VenvPlan(
        tuple(
            engine_venv.VenvAction(kind, "")
            for kind in ("create", "install-engine", "push-wheel", "install-wheel")
        )
    )
    engine_venv.apply(conn, wanted, steps, facts)
    calls = sandbox.calls
    assert_arrived(calls, wanted.python, command="[")
    assert_arrived(calls, f"{wanted.engine.base_venv}/bin/python", command="[")
    assert_arrived(calls, posixpath.dirname(wanted.venv), command="mkdir")
    assert [base_python, "-m", "venv", "--clear", "--without-pip", wanted.venv] in calls
    installs = [c for c in calls if c[0] == wanted.python and "install" in c]
    assert [c[-1] for c in installs] == [wanted.requirement, wanted.remote_wheel]
    assert_arrived(calls, posixpath.dirname(wanted.remote_wheel), command="[")


# --------------------------------------------------------------------------- training/


def _job(folder: str) -> TrainingJob:
    return TrainingJob(
        name="run",
        folder=folder,
        target="/models/target",
        dataset=f"{folder}/dataset.jsonl",
        data=DataSettings(base_url="http://127.0.0.1:9", served_model="m"),
        drafter=DrafterShape(num_layers=1, block_size=4, target_layer_ids=(1,), mask_token_id=0),
    )


def test_training_stage_start_poll_and_failure(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str, payload: str
) -> None:
    """The stage's detached script, the inner script it runs, the polls and the failure reads."""
    job = _job(hostile)
    python = f"{hostile}/venv/bin/python"
    secrets = f"{hostile}/secrets.env"
    env = {"DFO_VALUE": payload, "DFO_EMPTY": ""}
    with pytest.raises(StageFailed):
        run_remote_stage(
            conn,
            job,
            "data",
            python,
            container="c",
            env=env,
            secrets=secrets,
            say=lambda _: None,
            poll_s=0,
        )
    calls = sandbox.calls
    setsid = [c for c in calls if c[:3] == ["setsid", "sh", "-c"]]
    assert len(setsid) == 1
    sandbox.stub(python)
    inner = sandbox.run(setsid[0][3])  # what the detached sh runs
    assert ["export", f"DFO_VALUE={payload}"] in inner.calls
    assert ["export", "DFO_EMPTY="] in inner.calls
    assert [python, "-m", "dflashops.training", "data", "--job", job.paths.job] in inner.calls
    assert ["cd", job.folder] in inner.calls
    assert_arrived(inner.calls, secrets, command="[")
    assert_safe(inner.calls)
    assert_arrived(calls, posixpath.join(hostile, "logs"), command="mkdir")
    assert_arrived(calls, f"{hostile}/logs/data.stdout", command="tail")
    assert_arrived(calls, f"{hostile}/logs/data.stderr", command="tail")
    assert_arrived(calls, job.paths.log("data"), command="tail")
    assert_arrived(calls, f"{hostile}/logs/data.exit", command="cat")


def test_training_poll_script_reads_written_output(sandbox: ShellSandbox, hostile: str) -> None:
    job = _job(hostile)
    files = StageFiles.of(job, "train")
    Path(files.stdout).parent.mkdir(parents=True)
    Path(files.stdout).write_text('{"message": "hi"}\n')
    Path(files.exit).write_text("0\n")
    run = sandbox.run(poll_script(files, 0))
    assert '{"message": "hi"}' in run.stdout and "\n0\n" in run.stdout
    assert_safe(run.calls)


def test_env_names_are_checked_where_they_are_read(payload: str) -> None:
    """Env names go unquoted into ``export NAME=…``; the playbook admits only identifiers."""
    with pytest.raises(ValidationError):
        Server.model_validate({"env": {f"A{payload}": "x"}})


def test_training_facts_probe(conn: SandboxConnection, sandbox: ShellSandbox, hostile: str) -> None:
    job = _job(hostile)
    python = f"{hostile}/venv/bin/python"
    checkpoints = Path(job.paths.checkpoints)
    (checkpoints / "3").mkdir(parents=True)
    (checkpoints / "3" / "training_state.json").write_text("{}")
    found = training_facts.probe(conn, job.paths, python, hostile_layout(hostile))
    assert found.run.exists and found.run.checkpoints == ("3",)
    calls = sandbox.calls
    assert_arrived(calls, python, command="test")
    assert ["cd", job.folder] in calls
    assert_arrived(calls, job.paths.job, command="cat")
    assert_arrived(calls, job.paths.checkpoints, command="ls")


def test_training_container_dataset(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str
) -> None:
    book = load_playbook(LAB_PLAYBOOK)
    assert book.train is not None
    where = f"{hostile}/prompts.jsonl"
    dataset = book.train.dataset.model_copy(update={"path": where})
    book = book.model_copy(update={"train": book.train.model_copy(update={"dataset": dataset})})
    Path(hostile).mkdir(parents=True)
    Path(where).write_text('{"prompt": "a"}\n\n{"prompt": "b"}\n')
    info = container_dataset(conn, book, LAB_PLAYBOOK)
    assert (info.lines, info.path) == (2, where)
    assert_arrived(sandbox.calls, where, command="test")
    assert_arrived(sandbox.calls, where, command="grep")


# --------------------------------------------------------------------------- bench/


def test_bench_log_size_and_roofline_listing(
    conn: SandboxConnection, sandbox: ShellSandbox, hostile: str
) -> None:
    Path(hostile).mkdir(parents=True)
    Path(f"{hostile}/server.log").write_text("12345")
    assert RemoteServerLog(conn, f"{hostile}/server.log").size() == 5
    assert_arrived(sandbox.calls, f"{hostile}/server.log", command="stat")
    facts = probe_roofline_facts(conn, model_dir=hostile, query_gpus=False)
    assert facts.weights is None  # find is recorded, not run: no listing
    assert_arrived(sandbox.calls, hostile, command="find")
    assert_arrived(sandbox.calls, f"{hostile}/{SHARD_INDEX}", command="test")


def test_bench_log_named_like_an_option(
    conn: SandboxConnection, sandbox: ShellSandbox, payload: str
) -> None:
    """``--server-log`` is not checked to be absolute: ``-x`` or ``--flag`` is a file name
    (stat really runs here: without ``--`` it refuses the option and the size is lost)."""
    (sandbox.cwd / payload).write_text("123")
    assert RemoteServerLog(conn, payload).size() == 3
    assert_arrived(sandbox.calls, payload, command="stat")


def test_weights_folder_named_like_an_option(conn: SandboxConnection, payload: str) -> None:
    """find reads a leading ``-`` as an expression (``-delete``): the start point never has one."""
    probe_roofline_facts(conn, model_dir=payload, query_gpus=False)
    start = next(c[2] for c in conn.sandbox.calls if c[:2] == ["find", "-L"])
    assert not start.startswith("-") and posixpath.normpath(start) == payload


# --------------------------------------------------------------------------- proxmox/


def test_pct_set_script(sandbox: ShellSandbox, payload: str) -> None:
    """Option values and the API's digest reach the node's shell as one word each."""
    options = (("dev0", payload), ("dev1", f"/dev/nvidia0,{payload}"))
    run = sandbox.run(pct_set_script("pve", 101, "", options))
    assert ["pct", "set", "101", "-dev0", payload, "-dev1", f"/dev/nvidia0,{payload}"] in (
        run.calls
    )
    assert_safe(run.calls)
    run = sandbox.run(pct_set_script("pve", 101, payload, options))
    assert_arrived(run.calls, payload, command="[")
    assert run.exit_code == 3 and not run.commands("pct")
    assert_safe(run.calls)


def test_rewrite_conf_script(sandbox: ShellSandbox, hostile: str, payload: str) -> None:
    path = f"{hostile}/101.conf"
    Path(hostile).mkdir(parents=True)
    Path(path).write_text("arch: amd64\n")
    digest = hashlib.sha1(b"arch: amd64\n").hexdigest()
    text = f"arch: amd64\nlxc.mount.entry: {payload}\n"
    run = sandbox.run(rewrite_conf_script(path, digest, text))
    moves = run.commands("mv")
    assert len(moves) == 1 and moves[0][2] == path and moves[0][1].startswith(f"{path}.tmp.")
    assert Path(moves[0][1]).read_text() == text
    assert_safe(run.calls)
    assert sandbox.run(rewrite_conf_script(path, payload, text)).exit_code == 3


def test_guest_mount_probe(conn: SandboxConnection, sandbox: ShellSandbox, hostile: str) -> None:
    """Mount paths are validated in the inventory; the probe must not rely on it."""
    Path(hostile).mkdir(parents=True)
    mount = CtMount.model_construct(host_path=Path("/h"), path=Path(hostile), read_only=True)
    ct = Container.model_construct(name="ct", cluster="c", node="n", mounts=[mount])
    run = sandbox.run(probe_script(guest.guest_probes(ct)))
    assert_arrived(run.calls, hostile, command="[")
    assert f"dir {hostile}" in run.stdout
    assert guest._exists(conn, hostile)
    assert_arrived(sandbox.calls, hostile, command="test")


def test_guest_driver_install(conn: SandboxConnection, sandbox: ShellSandbox, payload: str) -> None:
    guest._install_driver(conn, payload)
    run = f"/tmp/NVIDIA-Linux-x86_64-{payload}.run"
    # no curl in the sandbox's PATH (`command -v` finds none): the wget branch
    assert ["wget", "-q", "-O", run, guest.DRIVER_URL.format(v=payload)] in sandbox.calls
    assert ["sh", run, "--silent", "--no-questions"] == sandbox.calls[-2][:4]
    assert ["rm", "-f", run] in sandbox.calls


# --------------------------------------------------------------------------- lab/


def test_lab_mount_commands(sandbox: ShellSandbox, hostile: str) -> None:
    target = "/" + hostile.lstrip("/")
    source = Path(f"{hostile}/src")
    mounts = [
        LabMount.tmpfs(target),
        LabMount.bind(source, target, read_only=True),
        LabMount.overlay(target),
    ]
    scratch = Path(f"{hostile}/ovl")
    run = sandbox.run("\n".join(_mount_commands(mounts, scratch)))
    assert ["mount", "--bind", str(source), target] in run.calls
    assert ["mount", "-o", "remount,bind,ro", target] in run.calls
    overlay = f"lowerdir={target},upperdir={scratch}/2/upper,workdir={scratch}/2/work"
    assert ["mount", "-t", "overlay", "dfo-ovl", "-o", overlay, target] in run.calls
    assert_safe(run.calls)


def test_lab_node_setup(sandbox: ShellSandbox, hostile: str) -> None:
    realdev = f"{hostile}/realdev"
    run = sandbox.run(node_setup_script(Path(hostile), NodeSpec()))
    assert ["mkdir", "-p", realdev] in run.calls
    assert ["mount", "--rbind", "/dev", realdev] in run.calls
    assert ["mount", "--bind", f"{realdev}/null", "/dev/null"] in run.calls
    assert_safe(run.calls)


def test_every_payload_is_checked() -> None:
    """The payloads cover each way a shell splits or runs text."""
    joined = "".join(PAYLOADS)
    for needed in ("'", '"', "$(", "`", ";", "|", "&&", "\n", " ", "\t", "*", "\\", "~", "#"):
        assert needed in joined
    assert any(p.startswith("-") for p in PAYLOADS)
