"""``drafter train``'s plan from canned facts: the drafter's shape and where each key came from,
which stages run or are done, sizes, the server's steps, what a rerun refuses; the remote
stage's progress parsing; and the rendering (tables that survive a pipe, JSON, the loss PNG)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import RenderableType

from dflashops.cli.console import make_console
from dflashops.deployment.layout import Layout
from dflashops.drafter.files import AddedToken, TargetFiles, TokenizerInfo
from dflashops.drafter.registry import load_registry
from dflashops.errors import ConfigError, PlaybookError
from dflashops.playbook.load import load_playbook
from dflashops.training.evaluate import DrafterScore, Evaluation
from dflashops.training.facts import ContainerFacts, RunFacts, parse_probe, probe_script
from dflashops.training.inputs import build_job, read_local_dataset
from dflashops.training.job import TrainingFolder
from dflashops.training.outcome import TrainOutcome
from dflashops.training.plan import (
    DatasetInfo,
    TargetSize,
    TrainingPlanError,
    TrainPlan,
    make_plan,
)
from dflashops.training.remote import StageFollower, start_script
from dflashops.training.render import outcome_renderables, plan_renderables
from dflashops.training.shape import registry_entry_for, resolve_shape

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "playbooks" / "lab-dflash.yaml"
LAYOUT = Layout()
TARGET_SIZE = TargetSize(hidden_size=128, num_layers=4)
DATASET = DatasetInfo("container", "/opt/lab/models/prompts.jsonl", 28, 5600, 24, None)


def _target(layers: int = 4, mask: bool = True) -> TargetFiles:
    added = {2: AddedToken("<|im_end|>", True)}
    if mask:
        added[3] = AddedToken("<|mask|>", True)
    tokenizer = TokenizerInfo(added=added, ordinary_ids=frozenset(range(4, 2000)))
    config = {"num_hidden_layers": layers, "hidden_size": 128, "vocab_size": 2048}
    return TargetFiles(name="tiny", config=config, tokenizer=tokenizer)


def _facts(run: RunFacts | None = None, *, running: bool = True) -> ContainerFacts:
    return ContainerFacts(
        run=run or RunFacts(),
        engine_python=True,
        server_running=running,
        server_pid=41 if running else None,
        manifest=None,
    )


def _plan(facts: ContainerFacts, overrides: tuple[str, ...] = (), **flags: bool) -> TrainPlan:
    book = load_playbook(LAB, list(overrides))
    assert book.train is not None
    entry = registry_entry_for(book, load_registry())
    shape = resolve_shape(book.train.drafter, entry, _target(), k=4)
    job = build_job(book, LAB, shape=shape.to_job(), manifest=None, layout=LAYOUT)
    return make_plan(
        container="lab-ct1",
        job=job,
        shape=shape,
        dataset=DATASET,
        facts=facts,
        target=TARGET_SIZE,
        out_dir=Path("out"),
        **flags,
    )


def test_shape_comes_from_the_playbook_then_the_registry() -> None:
    book = load_playbook(LAB)
    assert book.train is not None
    entry = registry_entry_for(book, load_registry())
    assert entry is not None and entry.name == book.drafter.ref
    shape = resolve_shape(book.train.drafter, entry, _target(), k=4)
    rows = {key: (value, source) for key, value, source in shape.rows()}
    assert rows["num_layers"] == (1, "playbook")
    assert rows["layer_types"] == ("sliding_attention", "playbook")
    ids = entry.value("dflash_config.target_layer_ids")
    assert ids is not None and rows["target_layer_ids"] == (ids.value, f"registry {entry.name}")
    block = entry.value("block_size")
    assert block is not None and rows["block_size"] == (block.value, f"registry {entry.name}")


def test_shape_without_a_registry_entry_comes_from_the_target() -> None:
    book = load_playbook(LAB, ["drafter.ref=null"])
    assert book.train is not None
    empty = book.train.drafter.model_copy(update={"num_layers": None, "layer_types": None})
    shape = resolve_shape(empty, None, _target(layers=36), k=4)
    rows = {key: (value, source) for key, value, source in shape.rows()}
    assert rows["num_layers"][0] == 1
    assert rows["target_layer_ids"][0] == [18]  # z-lab's spread: one id -> N // 2
    assert "z-lab" in rows["target_layer_ids"][1]
    assert rows["mask_token_id"] == (3, "target tokenizer: special token <|mask|>")
    assert rows["block_size"][0] == 8 and "speculators" in rows["block_size"][1]
    assert rows["layer_types"][0] == "sliding_attention"
    no_mask = resolve_shape(empty, None, _target(mask=False), k=9)
    assert no_mask.mask_token_id.value == 2000  # the first id past the tokenizer
    assert no_mask.block_size.value == 10  # k + 1 when the server drafts more than 7


def test_a_shape_that_cannot_be_chosen_names_the_playbook_key() -> None:
    book = load_playbook(LAB)
    assert book.train is not None
    target = TargetFiles(name="t", config={"num_hidden_layers": 4}, tokenizer=None)
    with pytest.raises(PlaybookError, match="mask_token_id") as caught:
        resolve_shape(book.train.drafter, None, target)
    assert caught.value.key == "train.drafter.mask_token_id"


def test_a_fresh_run_plans_every_stage_and_the_server_steps() -> None:
    plan = _plan(_facts())
    assert [(s.stage, s.status) for s in plan.stages] == [
        ("data", "run"),
        ("prepare", "run"),
        ("train", "run"),
        ("export", "run"),
    ]
    assert plan.server == (
        "the data stage uses the running server",
        "stop the server before prepare: training needs its GPUs",
        "restart the previous server",
    )
    promoted = _plan(_facts(), evaluate=True, promote=True).server
    assert promoted[-2:] == (
        "evaluate: bench the drafter it replaces, launch the new one, bench it",
        "promote: write the new playbook and launch it",
    )
    job = plan.job
    assert job.folder == "/var/lib/dflashops/training/lab-dflash"
    assert job.data.base_url == "http://127.0.0.1:30000/v1"  # loopback: the stage runs inside
    assert job.data.api_key_env is None and job.train.device == "cpu"
    per_sample = plan.sizes["tokens_per_sample_max"]
    assert per_sample == 5600 // 28 // 4 + 48  # prompt bytes / 4 + max_tokens
    layers = len(job.drafter.target_layer_ids) + 1
    assert plan.sizes["hidden_state_bytes"] == 24 * per_sample * 128 * layers * 4
    assert plan.sizes["train_steps"] == 30
    assert 60 < plan.estimate_s < 600  # minutes on the lab, not hours
    assert not plan.push_dataset  # the dataset is already in the container


def test_a_rerun_skips_what_is_done_and_resumes_the_rest() -> None:
    first = _plan(_facts())
    run = RunFacts(
        exists=True,
        job_text=first.job.to_json(),
        done={"data": {"summary": {"samples": 24}, "seconds": 31.5}},
        checkpoints=("checkpoint-10", "checkpoint-20"),
    )
    plan = _plan(_facts(run, running=False))
    statuses = {s.stage: (s.status, s.detail) for s in plan.stages}
    assert statuses["data"] == ("done", "finished in 31.5 s: samples 24")
    assert statuses["prepare"][0] == "run"
    assert statuses["train"] == ("resume", "from checkpoint checkpoint-20")
    assert plan.to_run == ("prepare", "train", "export")
    assert plan.server == ()  # stopped and not needed: nothing to stop or restart
    partial = _plan(_facts(RunFacts(exists=True, regenerated_samples=10)))
    assert partial.stages[0].status == "resume"
    assert partial.stages[0].detail == "10 of 24 samples already regenerated"


def test_changed_train_settings_rerun_train_and_export_only() -> None:
    first = _plan(_facts())
    run = RunFacts(exists=True, job_text=first.job.to_json(), done={"data": {}, "prepare": {}})
    plan = _plan(_facts(run), ("train.steps.max_steps=60",))
    assert [s.status for s in plan.stages] == ["done", "done", "rerun", "rerun"]
    assert plan.notes == ("train.max_steps changed since the last run: train and export run again",)


def test_other_changes_and_running_stages_are_refused() -> None:
    first = _plan(_facts())
    run = RunFacts(exists=True, job_text=first.job.to_json(), done={"data": {}})
    with pytest.raises(TrainingPlanError, match=r"data\.temperature 0\.0 -> 0\.7") as caught:
        _plan(_facts(run), ("train.data.temperature=0.7",))
    assert "train.name" in (caught.value.hint or "")
    busy = RunFacts(exists=True, running={"train": 4242})
    with pytest.raises(TrainingPlanError, match=r"train stage .* still running .*pid 4242"):
        _plan(_facts(busy))


def test_the_probe_output_is_read_back() -> None:
    script = probe_script(TrainingFolder("/r"), "/opt/v/bin/python")
    assert "kill -0" in script and "/r/stages/train.json" in script
    output = "\n".join(
        [
            "--dflashops-train--python",
            "yes",
            "--dflashops-train--job",
            '{"name": "r"}',
            "--dflashops-train--dataset",
            "ab12  -",
            "--dflashops-train--regenerated",
            "7",
            "--dflashops-train--checkpoints",
            "checkpoint-5",
            "--dflashops-train--export",
            "--dflashops-train--done:data",
            '{"summary": {"samples": 7}}',
            "--dflashops-train--running:data",
            "--dflashops-train--done:prepare",
            "--dflashops-train--running:prepare",
            "991",
        ]
    )
    run, python = parse_probe(output)
    assert python and run.exists and run.job_text is not None
    assert run.done == {"data": {"summary": {"samples": 7}}}
    assert run.running == {"prepare": 991}
    assert (run.dataset_sha256, run.regenerated_samples) == ("ab12", 7)
    assert run.checkpoints == ("checkpoint-5",) and not run.has_export
    absent, python = parse_probe("--dflashops-train--python\n--dflashops-train--absent\n")
    assert not absent.exists and not python


def test_stage_progress_lines_become_messages_and_a_summary() -> None:
    said: list[str] = []
    follower = StageFollower("train", said.append)
    follower.feed('{"message": "step 1/30", "elapsed_s": 1.0}\n{"mess')
    follower.feed('age": "train: step 2/30"}\nnot json\n{"done": {"steps": 30}}\n')
    assert said == ["train: step 1/30", "train: step 2/30"]
    assert follower.summary == {"steps": 30}


def test_the_stage_command_keeps_the_key_off_the_command_line() -> None:
    plan = _plan(_facts(), ("server.api_key_env=LAB_KEY",))
    assert plan.job.data.api_key_env == "VLLM_API_KEY"  # as launch writes it in secrets.env
    script = start_script(
        plan.job, "data", "/opt/v/bin/python", env={"HF_HUB_OFFLINE": "1"}, secrets="/etc/s.env"
    )
    assert ". /etc/s.env" in script and "setsid" in script
    assert "LAB_KEY" not in script and "Bearer" not in script


def test_a_bad_local_dataset_line_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"prompt": "one"}\n\n{"prompt": 2}\n')
    book_path = tmp_path / "book.yaml"
    book_path.write_text(
        LAB.read_text()
        .replace("path: /opt/lab/models/prompts.jsonl", "path: prompts.jsonl")
        .replace("source: container", "source: local")
    )
    book = load_playbook(book_path)
    with pytest.raises(ConfigError) as caught:
        read_local_dataset(book, book_path)
    assert caught.value.one_line() == f"{data}:3:prompt: must be a non-empty string"
    assert caught.value.cli_exit_code == 2
    data.write_text('{"prompt": "one"}\n{"prompt": "two"}\n')
    local = read_local_dataset(book, book_path)
    assert local is not None and local.info.samples == 2 and local.info.sha256


def _render(renderables: list[RenderableType], capsys: pytest.CaptureFixture[str]) -> str:
    """What the CLI prints into a pipe (the console every command uses)."""
    capsys.readouterr()
    console = make_console()
    for renderable in renderables:
        console.print(renderable)
    return capsys.readouterr().out


def _row(lines: list[str], first: str) -> list[str]:
    """The cells of the table row whose first cell is ``first``, each read down its lines."""
    rows: list[list[str]] = []
    for line in lines:
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells[0] or not rows:
            rows.append(cells)
        else:  # a continuation line of the row above
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return next(row for row in rows if row[0] == first)


def test_the_dry_run_plan_renders_stages_sources_and_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = _plan(_facts())
    text = _render(plan_renderables(plan, dry_run=True), capsys)
    assert "dry run: nothing was changed" in text
    lines = text.splitlines()
    # in a pipe a table fits 120 columns: a stage's detail wraps at spaces, each path stays whole
    for stage in plan.stages:
        assert _row(lines, stage.stage)[2] == stage.detail
    for _, where in plan.files:
        assert any(where in line for line in lines)
    assert _row(lines, "block_size")[2] == "registry dflashops-lab/tiny-qwen3-dflash"
    assert "estimated time" in text
    data = plan.to_json()
    assert json.loads(json.dumps(data))["stages"][0] == {
        "stage": "data",
        "status": "run",
        "detail": plan.stages[0].detail,
        "estimate_s": plan.stages[0].estimate_s,
    }
    assert data["drafter"][0] == {"key": "num_layers", "value": 1, "source": "playbook"}


def test_the_outcome_renders_the_evaluation_per_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = _plan(_facts())
    before = DrafterScore("current", "/opt/d", 4, 10.0, 1.05, (0.05, 0.0), "b.json")
    after = DrafterScore("trained", "/x/export", 4, 20.0, 2.4, (0.8, 0.4, 0.2, 0.1), "a.json")
    outcome = TrainOutcome(
        plan=plan,
        out_dir=tmp_path,
        ran=["data", "prepare", "train", "export"],
        summaries={"train": {"steps": 30, "final_loss": 2.5}},
        evaluation=Evaluation(before, after),
    )
    text = _render(outcome_renderables(outcome, None), capsys)
    assert "steps 30, final_loss 2.5" in text
    assert "pos 3" in text and "0.80" in text and "+100% tok/s" in text
    saved = json.loads(outcome.save().read_text())
    assert saved["evaluation"]["gain"] == pytest.approx(1.0)
