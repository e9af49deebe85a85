"""The lab model build, run in the vLLM runtime: byte-identical rebuilds and configs that vLLM
and the DFlash checker accept."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from dflashops.lab.models import layout
from dflashops.lab.models.ensure import run_builder
from dflashops.lab.runtime import VllmRuntime

pytestmark = pytest.mark.vllm


def safetensors_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header: dict[str, Any] = json.loads(handle.read(size))
    return header


def config(folder: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((folder / "config.json").read_text())
    return data


def test_same_seed_and_corpus_build_byte_identical_files(
    vllm_runtime: VllmRuntime, lab_models: layout.LabModels, tmp_path: Path
) -> None:
    again = layout.LabModels(tmp_path / "again")
    run_builder(vllm_runtime, again.root, seed=0, progress=lambda _message: None)
    first = layout.tree_digest(lab_models.root)
    second = layout.tree_digest(again.root)
    assert list(first) == list(second)
    assert first == second
    # every file is in the manifest, with its digest
    manifest = lab_models.read_manifest()
    assert manifest is not None
    assert manifest["files"] == {k: v for k, v in first.items() if k != layout.MANIFEST}
    assert lab_models.is_complete(0)


def test_target_is_a_tiny_qwen3_with_a_chatml_tokenizer(lab_models: layout.LabModels) -> None:
    target = config(lab_models.target)
    assert target["architectures"] == ["Qwen3ForCausalLM"]
    assert (target["num_hidden_layers"], target["hidden_size"], target["head_dim"]) == (4, 128, 32)
    assert target["vocab_size"] == 2048
    tokenizer = json.loads((lab_models.target / "tokenizer.json").read_text())
    specials = {t["content"]: t["id"] for t in tokenizer["added_tokens"] if t["special"]}
    assert specials == {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "<|mask|>": 3}
    template = (lab_models.target / "chat_template.jinja").read_text()
    assert "<|im_start|>assistant" in template


def test_dflash_drafter_config_matches_its_target(lab_models: layout.LabModels) -> None:
    target = config(lab_models.target)
    drafter = config(lab_models.dflash)
    assert drafter["architectures"] == ["DFlashDraftModel"]
    assert drafter["model_type"] == "qwen3"
    assert drafter["layer_types"] == ["full_attention"] * drafter["num_hidden_layers"]
    assert drafter["num_target_layers"] == target["num_hidden_layers"]
    ids = drafter["dflash_config"]["target_layer_ids"]
    assert len(ids) >= 2
    assert all(0 <= i < target["num_hidden_layers"] for i in ids)
    tokenizer = json.loads((lab_models.target / "tokenizer.json").read_text())
    special_ids = {t["id"] for t in tokenizer["added_tokens"] if t["special"]}
    assert drafter["dflash_config"]["mask_token_id"] in special_ids
    assert drafter["block_size"] == 5  # num_speculative_tokens 4 + the anchor
    assert drafter["vocab_size"] == target["vocab_size"]

    header = safetensors_header(lab_models.dflash / "model.safetensors")
    hidden = target["hidden_size"]
    assert header["fc.weight"]["shape"] == [hidden, hidden * len(ids)]
    names = [name for name in header if name != "__metadata__"]
    assert not any(name.startswith("model.") for name in names)
    assert not any("embed_tokens" in name or "lm_head" in name for name in names)


def test_drafts_are_copies_of_the_target(lab_models: layout.LabModels) -> None:
    digest = layout.tree_digest(lab_models.root)
    weights = "/model.safetensors"
    assert digest[layout.DRAFT_IDENTICAL + weights] == digest[layout.TARGET + weights]
    assert digest[layout.DRAFT_DECAY + weights] != digest[layout.TARGET + weights]
    assert config(lab_models.draft_decay) == config(lab_models.target)
    # the perturbation touches only the chosen layers
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
