"""`drafter train` end to end on the lab, through the real command: a lab container serving the
tiny target with real vLLM, a short real training run (data from the served target, the
speculators trainer on the CPU, export, drafter check), its train stage killed after the first
checkpoint and the run resumed from it, then evaluated against the drafter it replaces and
promoted, and the promoted drafter served by real vLLM. Before that: a bad dataset line is one
line naming file:line (exit 2) and --dry-run changes nothing in the container."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from dflashops.inventory.load import Inventory, load_inventory
from dflashops.launch.core import launch
from dflashops.playbook.load import load_playbook, resolve_playbook_path
from dflashops.proxmox.apply import provision
from dflashops.remote import SshConnection
from tests.support.lab import isolated_lab_env, require_lab, run_cli
from tests.support.vllm_servers import runtime_or_skip, spec_decode_counts
from tests.support.vllm_slot import VllmSlot

pytestmark = [pytest.mark.root, pytest.mark.vllm, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
RUN = "itest"
FOLDER = f"/var/lib/dflashops/training/{RUN}"
SAMPLES = 64
STEPS = 60
# short rows, a checkpoint every 10 steps: the train stage runs long enough (~15 s on 2 cores)
# to be cut after its first checkpoint
TRAIN = f"""
train:
  name: {RUN}
  dataset:
    path: prompts.jsonl
  data:
    max_tokens: 24
    concurrency: 2
  drafter:
    layer_types: sliding_attention
  steps:
    max_steps: {STEPS}
    checkpoint_every: 10
    seq_len: 96
    lr: 0.001
"""
# what dflashops manages in a container: a dry run must leave all of it as it was
MANAGED = "/var/lib/dflashops /etc/dflashops /opt/dflashops/wheels"


@dataclass
class Lab:
    env: dict[str, str]
    inventory: Inventory
    workdir: Path
    playbook: Path

    def ssh(self) -> SshConnection:
        ct = self.inventory.container("lab-ct1")
        return SshConnection.from_access(ct.ssh, host=ct.ssh_host, deadline=60)

    def train(self, *args: str, playbook: Path | None = None) -> list[str]:
        return [
            sys.executable,
            "-m",
            "dflashops.cli",
            "drafter",
            "train",
            "lab-ct1",
            "-p",
            str(playbook or self.playbook),
            "--out",
            str(self.workdir / "out"),
            *args,
        ]


def _playbook(folder: Path) -> Path:
    """The lab playbook with a train section of its own: a local dataset of corpus lines."""
    folder.mkdir(parents=True, exist_ok=True)
    corpus = (REPO / "dflashops" / "lab" / "models" / "corpus" / "prose.txt").read_text()
    lines = [line.strip() for line in corpus.splitlines() if len(line.strip()) > 40][:SAMPLES]
    (folder / "prompts.jsonl").write_text(
        "".join(json.dumps({"id": f"p{i}", "prompt": line}) + "\n" for i, line in enumerate(lines))
    )
    text = resolve_playbook_path("lab-dflash").read_text()
    path = folder / "train-lab.yaml"
    path.write_text(text[: text.index("\ntrain:")] + TRAIN if "\ntrain:" in text else text + TRAIN)
    return path


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    require_lab()
    runtime_or_skip()
    workdir = tmp_path_factory.mktemp("trainlab")
    env = isolated_lab_env(workdir, tag="r", cidr="10.200.17.0/24")
    run_cli(env, "lab", "down", check=False)
    with VllmSlot():
        status = json.loads(run_cli(env, "lab", "up", "--json").stdout)
        try:
            inventory = load_inventory(Path(status["inventory"]))
            assert provision(inventory, ["lab-ct1"]).ok
            book = _playbook(workdir / "playbooks")
            launch(inventory, "lab-ct1", load_playbook(book))  # the server data comes from
            yield Lab(env, inventory, workdir, book)
        finally:
            run_cli(env, "lab", "down", check=False, timeout=180)


def _managed_files(lab: Lab) -> str:
    with lab.ssh() as conn:
        return conn.run(
            f"find {MANAGED} -type f -printf '%p %s %T@\\n' 2>/dev/null | sort; true"
        ).stdout


def test_a_bad_dataset_line_is_one_line_naming_file_and_line(lab: Lab) -> None:
    folder = lab.workdir / "bad"
    book = _playbook(folder)
    with (folder / "prompts.jsonl").open("a") as data:
        data.write('{"messages": [{"role": "assistant", "content": "no question"}]}\n')
    done = run_cli(lab.env, *lab.train(playbook=book)[3:], check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: {folder / 'prompts.jsonl'}:{SAMPLES + 1}:messages: no user turn to answer"
    ]
    with lab.ssh() as conn:
        assert conn.probe(f"test -e {FOLDER}").exit_code != 0  # nothing was pushed


def test_dry_run_prints_the_plan_and_changes_nothing(lab: Lab) -> None:
    before = _managed_files(lab)
    done = run_cli(lab.env, *lab.train("--dry-run", "--json")[3:])
    plan = json.loads(done.stdout)["plan"]
    assert [(s["stage"], s["status"]) for s in plan["stages"]] == [
        ("data", "run"),
        ("prepare", "run"),
        ("train", "run"),
        ("export", "run"),
    ]
    assert plan["folder"] == FOLDER and plan["push_dataset"] is True
    assert plan["dataset"]["samples"] == SAMPLES and plan["sizes"]["train_steps"] == STEPS
    assert "stop the server before prepare: training needs its GPUs" in plan["server"]
    assert plan["estimate_s"] > 0
    assert _managed_files(lab) == before
    assert not (lab.workdir / "out").exists()


def _interrupt_train(lab: Lab, command: subprocess.Popen[str]) -> None:
    """Kill the train stage's python (SIGKILL: a crash, the OOM killer, a lost node) once it has
    saved a whole checkpoint (speculators writes training_state.json last); its shell records
    the exit status."""
    deadline = time.monotonic() + 300
    with lab.ssh() as conn:
        while time.monotonic() < deadline:
            assert command.poll() is None, "drafter train ended before its train stage was cut"
            probe = conn.probe(
                f"test -s {FOLDER}/logs/train.pid && ! test -e {FOLDER}/stages/train.json "
                f"&& ls {FOLDER}/checkpoints/*/training_state.json >/dev/null 2>&1 "
                f"&& cat {FOLDER}/logs/train.pid"
            )
            if probe.exit_code == 0:
                conn.run(f"kill -KILL $(ps -o pid= --ppid {probe.stdout.strip()})")
                return
            time.sleep(0.1)
    raise AssertionError("the train stage saved no checkpoint in 300 s")


def test_train_interrupted_resumes_then_evaluates_promotes_and_serves(lab: Lab) -> None:
    started = time.monotonic()
    command = subprocess.Popen(
        lab.train(), env=lab.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    _interrupt_train(lab, command)
    out, err = command.communicate(timeout=300)
    assert command.returncode == 1, out + err
    error = next(line for line in err.splitlines() if line.startswith("error: "))
    assert error.startswith("error: the train stage failed in lab-ct1 (exit 137)")
    assert f"-m dflashops.training train --job {FOLDER}/job.json" in error  # the command
    assert "log tail: " in error and "run `drafter train` again to continue" in error
    assert "restarting the previous server" in err  # it served before the run
    first_s = time.monotonic() - started

    again = run_cli(lab.env, *lab.train("--evaluate", "--promote", "--json")[3:], timeout=600)
    report = json.loads(again.stdout)
    statuses = [(s["stage"], s["status"]) for s in report["plan"]["stages"]]
    assert statuses[:3] == [("data", "done"), ("prepare", "done"), ("train", "resume")]
    assert report["ran"] == ["train", "export"]
    train = report["summaries"]["train"]
    assert train["resumed_from_step"] >= 10 and train["steps"] == STEPS  # not from step 0
    assert report["check"]["status"] in {"clean", "warnings"}  # errors would have stopped it
    provenance = report["provenance"]
    assert provenance["dataset"]["samples"] == SAMPLES
    assert provenance["training"]["steps"] == train["steps"]
    assert Path(report["loss_curve"]).read_bytes()[:4] == b"\x89PNG"

    evaluation = report["evaluation"]
    assert evaluation["before"]["drafter"] == "/opt/lab/models/tiny-qwen3-dflash"
    assert evaluation["after"]["drafter"].startswith(f"{FOLDER}/promoted/")
    assert len(evaluation["after"]["per_position"]) == 4 and evaluation["after"]["tok_s"] > 0
    promoted = Path(report["promoted"])
    assert promoted == lab.playbook.with_name("train-lab.trained.yaml")
    served = load_playbook(promoted).drafter.model
    assert served is not None and served.path == Path(evaluation["after"]["drafter"])

    # the promoted drafter is what the container serves now, with DFlash drafting
    endpoint = f"http://{lab.inventory.container('lab-ct1').ssh_host}:30000"
    with httpx.Client(timeout=120) as client:
        reply = client.post(
            f"{endpoint}/v1/chat/completions",
            json={
                "model": "tiny",
                "messages": [{"role": "user", "content": "The"}],
                "max_tokens": 16,
                "temperature": 0,
            },
        )
        assert reply.status_code == 200, reply.text
        drafts, _ = spec_decode_counts(client.get(f"{endpoint}/metrics").text)
    assert drafts > 0
    print(
        f"\ninterrupted run {first_s:.0f} s; resumed from step {train['resumed_from_step']}, "
        f"run {report['seconds']:.0f} s; tok/s {evaluation['before']['tok_s']:.0f} -> "
        f"{evaluation['after']['tok_s']:.0f}, acceptance {evaluation['after']['per_position']}"
    )
