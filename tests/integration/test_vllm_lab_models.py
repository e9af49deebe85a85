"""The lab model build, run in the vLLM runtime: a byte-identical rebuild of its deterministic
part, configs that vLLM and the DFlash checker accept, and the DFlash drafter trained through the
drafter training stages, measured on a real vLLM server with its guessed-config copy beside it."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dflashops.lab.models import layout
from dflashops.lab.models.ensure import run_builder
from dflashops.lab.runtime import VllmRuntime
from tests.support.vllm_servers import (
    NUM_SPECULATIVE_TOKENS,
    VllmServer,
    complete_prompts,
    spec_decode_counts,
)

pytestmark = pytest.mark.vllm

# what a rebuild reproduces byte for byte (the drafter's data comes from a batched server)
DETERMINISTIC = (
    layout.TARGET,
    layout.DRAFT_IDENTICAL,
    layout.DRAFT_DECAY,
    layout.PROMPTS,
    layout.ACCEPTANCE,
    layout.TARGET_TRAINING,
)


def safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, Any] = json.loads(handle.read(size))
    return header


def config(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "config.json").read_text())
    return data


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_same_seed_and_corpus_rebuild_the_target_and_drafts_byte_identical(
    vllm_runtime: VllmRuntime, lab_models: layout.LabModels, tmp_path: Path
) -> None:
    again = layout.LabModels(tmp_path / "again")
    run_builder(
        vllm_runtime, again.root, seed=0, progress=lambda _message: None, without_dflash=True
    )
    first = layout.tree_digest(lab_models.root)
    second = layout.tree_digest(again.root)
    assert sorted(second) == sorted(k for k in first if k.split("/")[0] in DETERMINISTIC)
    assert {k: first[k] for k in second} == second
    # the full build's manifest names every file, with its digest
    manifest = lab_models.read_manifest()
    assert manifest is not None
    assert manifest["files"] == {k: v for k, v in first.items() if k != layout.MANIFEST}
    assert lab_models.is_complete(0)


def test_target_is_a_trained_tiny_qwen3_with_a_chatml_tokenizer(
    lab_models: layout.LabModels,
) -> None:
    target = config(lab_models.target)
    assert target["architectures"] == ["Qwen3ForCausalLM"]
    assert (target["num_hidden_layers"], target["hidden_size"], target["head_dim"]) == (4, 128, 32)
    assert target["vocab_size"] == 2048
    tokenizer = json.loads((lab_models.target / "tokenizer.json").read_text())
    specials = {t["content"]: t["id"] for t in tokenizer["added_tokens"] if t["special"]}
    assert specials == {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<|mask|>": 3}
    template = (lab_models.target / "chat_template.jinja").read_text()
    assert "<|im_start|>assistant" in template
    # trained: from ~ln(2048) = 7.6 nats per token down to text it mostly predicts
    training = json.loads(lab_models.target_training.read_text())
    losses = [point["loss"] for point in training["loss"]]
    assert losses[0] > 7.0
    assert training["final_loss"] < 1.0
    assert training["corpus_tokens"] > 70_000 and training["chat_windows"] > 100


def test_dflash_drafter_is_the_training_stages_export(lab_models: layout.LabModels) -> None:
    target = config(lab_models.target)
    drafter = config(lab_models.dflash)
    # the speculators layout vLLM reads: target layers 0, 1, 2 stored + 1, top-level mask
    assert drafter["speculators_model_type"] == "dflash"
    assert drafter["aux_hidden_state_layer_ids"] == [1, 2, 3]
    assert drafter["mask_token_id"] == 3  # <|mask|>
    assert drafter["block_size"] == NUM_SPECULATIVE_TOKENS + 1
    layers = drafter["transformer_layer_config"]
    assert layers["num_hidden_layers"] == 1
    assert layers["layer_types"] == ["sliding_attention"]
    assert layers["hidden_size"] == target["hidden_size"]
    header = safetensors_header(lab_models.dflash / "model.safetensors")
    hidden = target["hidden_size"]
    assert header["fc.weight"]["shape"] == [hidden, hidden * 3]

    record = lab_models.dflash_training
    job = json.loads((record / "job.json").read_text())
    assert job["drafter"]["layer_types"] == "sliding_attention"
    assert (job["data"]["temperature"], job["data"]["thinking"]) == (0.0, False)
    assert sorted(p.stem for p in (record / "stages").glob("*.json")) == sorted(
        ["data", "prepare", "train", "export"]
    )
    # the target's own answers, one per training prompt
    answers = jsonl(record / "regenerated.jsonl")
    assert len(answers) == len(jsonl(record / "dataset.jsonl")) >= 300
    assert all(a["conversations"][-1]["role"] == "assistant" for a in answers)
    # the loss fell over the run; the provenance says what it was trained on
    losses = [m["loss"] for m in jsonl(record / "metrics.jsonl") if "loss" in m]
    assert len(losses) > 100
    assert sum(losses[-10:]) < 0.5 * sum(losses[:10])
    provenance = json.loads((record / "provenance.json").read_text())
    assert provenance["dataset"]["samples"] == len(answers)
    assert provenance["dataset"]["sha256"] == layout.sha256_file(record / "dataset.jsonl")
    assert provenance["training"]["steps"] == len(losses)
    assert provenance["versions"]["speculators"] == "0.9.0"


def test_guessed_copy_is_the_same_weights_with_the_three_incident_keys(
    lab_models: layout.LabModels,
) -> None:
    digest = layout.tree_digest(lab_models.root)
    weights = "/model.safetensors"
    assert digest[layout.DFLASH_GUESSED + weights] == digest[layout.DFLASH + weights]
    trained, guessed = config(lab_models.dflash), config(lab_models.dflash_guessed)
    differ = {k for k in trained if trained[k] != guessed.get(k)}
    assert differ == {"aux_hidden_state_layer_ids", "mask_token_id", "transformer_layer_config"}
    assert guessed["transformer_layer_config"]["layer_types"] == ["full_attention"]
    assert guessed["aux_hidden_state_layer_ids"] != trained["aux_hidden_state_layer_ids"]
    assert guessed["mask_token_id"] != trained["mask_token_id"]


def test_drafts_are_copies_of_the_target(lab_models: layout.LabModels) -> None:
    digest = layout.tree_digest(lab_models.root)
    weights = "/model.safetensors"
    assert digest[layout.DRAFT_IDENTICAL + weights] == digest[layout.TARGET + weights]
    assert digest[layout.DRAFT_DECAY + weights] != digest[layout.TARGET + weights]
    assert config(lab_models.draft_decay) == config(lab_models.target)
    target = safetensors_header(lab_models.target / "model.safetensors")
    decay = safetensors_header(lab_models.draft_decay / "model.safetensors")
    assert target == decay  # same names, shapes, dtypes and offsets; only values differ


def test_decay_calibration_is_recorded(lab_models: layout.LabModels) -> None:
    report = json.loads(lab_models.acceptance.read_text())
    rates = report["per_position"]
    assert len(rates) == report["k"] == 4
    assert rates == sorted(rates, reverse=True)
    assert rates[0] > rates[3] + 0.2
    assert report["chosen_scale"] in [t["scale"] for t in report["trials"]]
    assert report["aim"] == {"0": 0.8, "3": 0.2}


def acceptance(server: VllmServer) -> tuple[float, list[float]]:
    """Drafts and per-position acceptance of the lab's completion prompts, sent greedily."""
    drafts_before, before = spec_decode_counts(server.metrics())
    complete_prompts(server, "decay")
    drafts_after, after = spec_decode_counts(server.metrics())
    drafts = drafts_after - drafts_before
    rates = [(after[pos] - before.get(pos, 0.0)) / drafts for pos in range(NUM_SPECULATIVE_TOKENS)]
    return drafts, rates


def test_trained_drafter_drafts_on_the_real_server(
    dflash_server: VllmServer, record_property: Callable[[str, object], None]
) -> None:
    drafts, rates = acceptance(dflash_server)
    length = 1 + sum(rates)
    record_property("per_position_acceptance", [round(r, 3) for r in rates])
    record_property("mean_acceptance_length", round(length, 3))
    print(f"trained DFlash drafter, {drafts:.0f} drafts: {rates}, length {length:.2f}")
    assert drafts >= 50
    assert rates[0] >= 0.6
    assert length >= 2.0
    assert rates == sorted(rates, reverse=True)  # cumulative: a later slot needs the earlier


def test_guessed_config_collapses_on_the_real_server(
    guessed_server: VllmServer, record_property: Callable[[str, object], None]
) -> None:
    drafts, rates = acceptance(guessed_server)
    length = 1 + sum(rates)
    record_property("mean_acceptance_length", round(length, 3))
    print(f"guessed config, {drafts:.0f} drafts: {rates}, length {length:.2f}")
    assert drafts >= 50
    assert length <= 1.1
