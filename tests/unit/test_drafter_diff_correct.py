"""drafter diff (dotted keys) and corrected_config (the building block of drafter push)."""

from __future__ import annotations

from typing import Any

import pytest

from dflashops.drafter import (
    DrafterFiles,
    corrected_config,
    diff_against_entry,
    diff_configs,
    load_registry,
    read_drafter,
    validate_drafter,
)
from dflashops.errors import DrafterError
from tests.fixtures.drafter import CORRECTED, GUESSED, REF_36, config

ENTRY = load_registry().resolve(REF_36)


def test_diff_configs_uses_dotted_keys() -> None:
    lines = diff_configs(config(GUESSED), config(CORRECTED))
    assert [(d.key, d.status) for d in lines] == [
        ("dflash_config.mask_token_id", "changed"),
        ("dflash_config.target_layer_ids", "changed"),
        ("layer_types", "changed"),
        ("sliding_window", "missing"),
    ]
    assert lines[0].drafter == "151669" and lines[0].other == "248070"


def test_diff_configs_nested_extra_and_missing() -> None:
    a = {"x": {"y": {"z": 1}}, "only_a": [1, 2], "same": {"k": True}}
    b = {"x": {"y": {"z": 1.0}, "w": None}, "same": {"k": True}}
    assert [(d.key, d.status) for d in diff_configs(a, b)] == [
        ("only_a", "extra"),
        ("x.w", "missing"),
        ("x.y.z", "changed"),  # 1 is not 1.0 for an engine reading JSON
    ]


def test_diff_against_entry_lists_only_known_keys_with_certainty() -> None:
    lines = {d.key: d for d in diff_against_entry(config(GUESSED), ENTRY)}
    assert set(lines) == {
        "layer_types",
        "sliding_window",
        "dflash_config.mask_token_id",
        "dflash_config.target_layer_ids",
    }
    assert lines["sliding_window"].status == "missing"
    assert (lines["layer_types"].certain, lines["layer_types"].basis) == (True, "agreed")
    assert diff_against_entry(config(CORRECTED), ENTRY) == []


def test_correction_keeps_unknown_keys_and_never_touches_the_input() -> None:
    current = config(GUESSED) | {"my_key": {"deep": [1]}, "intermediate_size": 1}
    current["dflash_config"]["causal"] = False
    before = config(GUESSED) | {"my_key": {"deep": [1]}, "intermediate_size": 1}
    before["dflash_config"]["causal"] = False
    new, _ = corrected_config(current, ENTRY)
    assert current == before
    assert new["my_key"] == {"deep": [1]}
    assert new["dflash_config"]["causal"] is False
    assert new["intermediate_size"] == 1  # the reference is not certain of it
    assert set(current) <= set(new)


def test_correction_patches_keys_where_engines_read_them() -> None:
    current = config(GUESSED)
    del current["block_size"]
    current["dflash_config"] |= {"block_size": 8, "swa_window_size": 1024}
    new, changes = corrected_config(current, ENTRY)
    assert "block_size" not in new
    assert new["dflash_config"]["block_size"] == 16
    assert new["dflash_config"]["swa_window_size"] == 2048
    assert "sliding_window" not in new  # swa_window_size is present and read first
    assert {c.key for c in changes} >= {"dflash_config.block_size", "dflash_config.swa_window_size"}


def test_correction_creates_a_missing_dflash_config_and_is_idempotent() -> None:
    current = config(GUESSED)
    del current["dflash_config"]
    new, changes = corrected_config(current, ENTRY)
    assert new["dflash_config"] == {
        "mask_token_id": 248070,
        "target_layer_ids": [1, 16, 31, 46, 61],
    }
    assert all(c.line() for c in changes)
    again, more = corrected_config(new, ENTRY)
    assert more == [] and again == new


@pytest.mark.parametrize("junk", ["x", 3, [1], None])
def test_correction_refuses_to_replace_a_non_object(junk: Any) -> None:
    current = config(GUESSED) | {"dflash_config": junk}
    with pytest.raises(DrafterError, match="dflash_config is"):
        corrected_config(current, ENTRY)


def test_a_corrected_config_has_no_registry_errors() -> None:
    drafter = read_drafter(str(GUESSED))
    new, _ = corrected_config(drafter.config, ENTRY)
    result = validate_drafter(DrafterFiles("fixed", new, weights=drafter.weights), ref=ENTRY)
    assert result.summary.errors == 0
