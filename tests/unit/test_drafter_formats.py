"""Drafter configs in the speculators library's layout: read the way vLLM's speculators adapter
converts them, checked by the same rules, findings named where the file holds each key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.drafter import DrafterFiles, load_registry, read_target
from dflashops.drafter.check import diff_paths
from dflashops.drafter.correct import corrected_config
from dflashops.drafter.formats import SPECULATORS, ZLAB, checked_view, config_format, file_key
from dflashops.drafter.result import CheckResult
from dflashops.drafter.safetensors import read_weights
from dflashops.drafter.validate import validate_drafter
from tests.fixtures.drafter import CORRECTED, GUESSED, REF_36, TARGET, config
from tests.fixtures.drafter.speculators_layout import as_speculators

REAL_TARGET = read_target(str(TARGET))
WEIGHTS = read_weights(CORRECTED)


def check(data: dict[str, Any], *, ref: bool = False) -> CheckResult:
    entry = load_registry().resolve(REF_36) if ref else None
    drafter = DrafterFiles(name="t", config=data, weights=WEIGHTS)
    return validate_drafter(drafter, REAL_TARGET, entry, None, 6)


def test_the_layout_is_recognised() -> None:
    assert config_format(config(CORRECTED)) == ZLAB
    assert config_format(as_speculators(config(CORRECTED))) == SPECULATORS


def test_the_view_is_what_vllm_builds() -> None:
    zlab = config(CORRECTED)
    view = checked_view(as_speculators(zlab) | {"sliding_window_non_causal": True})
    assert view["dflash_config"] == {
        "target_layer_ids": zlab["dflash_config"]["target_layer_ids"],
        "mask_token_id": zlab["dflash_config"]["mask_token_id"],
        "sample_from_anchor": False,
        "causal": False,
    }
    assert view["architectures"] == ["DFlashDraftModel"]
    for key in ("layer_types", "sliding_window", "num_hidden_layers", "hidden_size", "block_size"):
        assert view[key] == zlab[key], key


def test_a_correct_speculators_config_checks_as_clean_as_its_z_lab_twin() -> None:
    zlab = check(config(CORRECTED), ref=True)
    speculators = check(as_speculators(config(CORRECTED)), ref=True)
    assert zlab.summary.status == speculators.summary.status == "clean"


def test_the_incidents_guessed_values_are_named_where_the_file_holds_them() -> None:
    guessed = config(GUESSED)
    result = check(as_speculators(guessed), ref=True)
    errors = {f.key for f in result.findings if f.severity == "error"}
    assert {
        "aux_hidden_state_layer_ids (read as target_layer_ids = id - 1)",
        "mask_token_id",
        "transformer_layer_config.layer_types",
    } <= errors
    assert not any(f.key.startswith("dflash_config") for f in result.findings)


def test_a_missing_layer_config_is_the_error_vllm_raises() -> None:
    data = as_speculators(config(CORRECTED))
    del data["transformer_layer_config"]
    result = check(data)
    (finding,) = [f for f in result.findings if f.key == "transformer_layer_config"]
    assert finding.severity == "error" and finding.found == "(missing)"
    # what the layer config would have held is named inside it
    assert any(f.key == "transformer_layer_config.num_hidden_layers" for f in result.findings)


def test_ids_of_the_wrong_type_are_named_not_converted() -> None:
    data = as_speculators(config(CORRECTED)) | {"aux_hidden_state_layer_ids": "2,17"}
    assert checked_view(data)["dflash_config"]["target_layer_ids"] == "2,17"
    keys = {f.key for f in check(data).findings if f.severity == "error"}
    assert "aux_hidden_state_layer_ids (read as target_layer_ids = id - 1)" in keys
    assert not any("num_target_layers" in key for key in keys)  # z-lab only: no place here


def test_drafter_check_reads_a_speculators_checkpoint(tmp_path: Path) -> None:
    drafter = tmp_path / "drafter"
    shutil.copytree(CORRECTED, drafter)
    (drafter / "config.json").write_text(json.dumps(as_speculators(config(CORRECTED))))
    args = ["drafter", "check", str(drafter), "--target", str(TARGET), "--ref", REF_36]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["status"] == "clean"


def test_keys_that_are_not_the_files_stay_as_checked() -> None:
    data = as_speculators(config(CORRECTED))
    assert file_key("target.num_hidden_layers", data) == "target.num_hidden_layers"
    assert file_key("fc.weight", data) == "fc.weight"
    assert file_key("engine.layer_types", data) == "engine.layer_types"
    assert file_key("dflash_config.mask_token_id", config(CORRECTED)) == (
        "dflash_config.mask_token_id"
    )


def test_diff_against_the_registry_names_the_files_keys(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(as_speculators(config(GUESSED))))
    run = diff_paths(str(tmp_path), REF_36)
    keys = {line.key for line in run.lines}
    assert "mask_token_id" in keys
    assert "transformer_layer_config.layer_types" in keys
    assert "aux_hidden_state_layer_ids (read as target_layer_ids = id - 1)" in keys


def test_a_correction_is_written_where_the_speculators_layout_holds_each_key() -> None:
    entry = load_registry().resolve(REF_36)
    guessed = as_speculators(config(GUESSED))
    new, changes = corrected_config(guessed, entry)
    keys = {c.key for c in changes}
    assert {
        "aux_hidden_state_layer_ids",
        "mask_token_id",
        "transformer_layer_config.layer_types",
    } <= keys
    assert not any(k.startswith("dflash_config") or k == "num_target_layers" for k in keys)
    assert new["architectures"] == ["DFlashSpeculator"]  # speculators' class, kept
    view, fixed = checked_view(new), config(CORRECTED)
    assert view["dflash_config"]["target_layer_ids"] == fixed["dflash_config"]["target_layer_ids"]
    assert view["dflash_config"]["mask_token_id"] == fixed["dflash_config"]["mask_token_id"]
    assert view["layer_types"] == fixed["layer_types"]
    again, none = corrected_config(new, entry)
    assert none == [] and again == new
