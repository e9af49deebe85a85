"""The incident that started dflashops, end to end through the real readers and registry."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dflashops.drafter import (
    check_paths,
    corrected_config,
    load_registry,
    read_drafter,
    validate_drafter,
)
from tests.fixtures.drafter import CORRECTED, GUESSED, HERE, REF_36, TARGET, config
from tests.fixtures.drafter.make_fixtures import generated_files

THE_THREE = {"layer_types", "dflash_config.target_layer_ids", "dflash_config.mask_token_id"}


def test_committed_fixtures_equal_the_generator() -> None:
    for rel, data in generated_files().items():
        assert (HERE / rel).read_bytes() == data, f"{rel} is stale: run make_fixtures"


def test_guessed_against_the_reference_gives_the_three_errors_with_reasons() -> None:
    run = check_paths(str(GUESSED), ref=REF_36)
    assert run.match is not None and run.match.by == "ref"
    assert run.result.keys("error") == THE_THREE
    assert run.result.exit_code == 4
    by_key = {f.key: f for f in run.result.findings}
    assert by_key["layer_types"].expected.count("sliding_attention") == 4
    assert "attend differently" in by_key["layer_types"].why
    assert by_key["dflash_config.target_layer_ids"].expected == "[1, 16, 31, 46, 61]"
    assert "shifted by one" in by_key["dflash_config.target_layer_ids"].why
    assert by_key["dflash_config.mask_token_id"].expected == "248070"
    assert "noise" in by_key["dflash_config.mask_token_id"].why
    for key in THE_THREE:
        assert "certain" in by_key[key].why and REF_36 in by_key[key].why
    # the window only matters once layer_types is fixed: a note, not a fourth error
    assert by_key["sliding_window"].severity == "info"


def test_guessed_against_reference_and_target_still_three_errors() -> None:
    run = check_paths(str(GUESSED), target=str(TARGET), ref=REF_36)
    assert run.result.keys("error") == THE_THREE
    mask = next(f for f in run.result.findings if f.key == "dflash_config.mask_token_id")
    assert mask.expected == "248070"  # the registry's concrete value wins the row
    assert "ordinary text" in mask.why and "registry" in mask.check and "tokenizer" in mask.check


def test_guessed_against_target_alone_is_matched_by_its_target() -> None:
    """Nothing names the drafter and the registry holds no fingerprints, but the target's
    config is Qwen3.5/3.6-27B's and its folder name says 3.6: all three keys are errors."""
    run = check_paths(str(GUESSED), target=str(TARGET))
    assert run.match is not None and run.match.by == "target"
    assert run.match.entry.name == REF_36
    assert "64 layers" in run.match.detail and "picks Qwen/Qwen3.6-27B" in run.match.detail
    assert run.result.keys("error") == THE_THREE
    note = next(f for f in run.result.findings if f.key == "ref")
    assert note.severity == "info" and "--ref" in note.why
    assert "z-lab/Qwen3.5-27B-DFlash" in note.why  # the other candidate, named
    mask = next(f for f in run.result.findings if f.key == "dflash_config.mask_token_id")
    assert "ordinary text" in mask.why  # the tokenizer's reason is kept next to the registry's


def test_guessed_alone_is_warnings_only() -> None:
    run = check_paths(str(GUESSED))
    assert run.result.summary.status == "warnings"
    assert run.result.exit_code == 3


def test_corrected_is_clean_against_everything() -> None:
    run = check_paths(str(CORRECTED), target=str(TARGET), ref=REF_36, k=15)
    assert run.result.summary.errors == 0 and run.result.summary.warnings == 0
    assert run.result.exit_code == 0
    assert {f.key for f in run.result.findings} <= {"use_sliding_window"}


def test_corrected_config_turns_guessed_into_the_corrected_fixture() -> None:
    entry = load_registry().resolve(REF_36)
    new, changes = corrected_config(config(GUESSED), entry)
    assert new == config(CORRECTED)
    assert {c.key for c in changes} == {*THE_THREE, "sliding_window"}
    assert next(c for c in changes if c.key == "sliding_window").existed is False


def test_sharded_and_single_file_weights_have_one_fingerprint() -> None:
    single, sharded = read_drafter(str(GUESSED)), read_drafter(str(CORRECTED))
    assert single.weights is not None and sharded.weights is not None
    assert len(sharded.weights.files) == 2
    assert single.weights.fingerprint == sharded.weights.fingerprint
    assert single.weights.tensors["fc.weight"].shape == (5120, 25600)


def test_a_registry_fingerprint_matches_and_turns_on_the_comparison(tmp_path: Path) -> None:
    entry = json.loads((Path(load_registry().resolve(REF_36).file)).read_text())
    entry["name"] = "example/hashed-drafter"
    drafter = read_drafter(str(GUESSED))
    assert drafter.weights is not None
    entry["fingerprints"] = {drafter.weights.fingerprint: "hashed from the test fixture"}
    (tmp_path / "hashed.json").write_text(json.dumps(entry))
    run = check_paths(str(GUESSED), registry_paths=[tmp_path])
    assert run.match is not None and run.match.by == "fingerprint"
    assert run.match.entry.name == "example/hashed-drafter"
    assert run.result.keys("error") == THE_THREE


@pytest.mark.parametrize(
    ("layout", "by"),
    [
        ("hub/models--z-lab--Qwen3.6-27B-DFlash/snapshots/0123abc", "path"),
        ("models/Qwen3.6-27B-DFlash", "name"),  # the directory name is the drafter name
    ],
)
def test_a_drafter_is_matched_by_its_path(tmp_path: Path, layout: str, by: str) -> None:
    where = tmp_path / layout
    shutil.copytree(GUESSED, where)
    run = check_paths(str(where))
    assert run.match is not None and (run.match.by, run.match.entry.name) == (by, REF_36)
    assert run.result.keys("error") == THE_THREE


def test_a_drafter_is_matched_by_name_or_path_and_by_name(tmp_path: Path) -> None:
    data = config(GUESSED) | {"_name_or_path": "/cache/z-lab/Qwen3.6-27B-DFlash"}
    (tmp_path / "config.json").write_text(json.dumps(data))
    run = check_paths(str(tmp_path))
    assert run.match is not None and run.match.by == "name"
    named = check_paths(f"Qwen3.6-27B-DFlash:{GUESSED}")
    assert named.match is not None and named.match.entry.name == REF_36


def test_validate_is_pure_over_in_memory_files() -> None:
    drafter = read_drafter(str(GUESSED))
    first = validate_drafter(drafter, None, load_registry().resolve(REF_36), None, None)
    second = validate_drafter(drafter, None, load_registry().resolve(REF_36), None, None)
    assert first == second
    assert drafter.config == config(GUESSED)  # never modified
