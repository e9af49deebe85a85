"""Each rule of validate_drafter, on the corrected fixture with one thing broken at a time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter import DrafterFiles, TargetFiles, load_registry, read_drafter, read_target
from dflashops.drafter.checks_target import even_spread
from dflashops.drafter.files import read_tokenizer
from dflashops.drafter.result import CheckResult
from dflashops.drafter.safetensors import WeightsInfo, read_weights
from dflashops.drafter.validate import validate_drafter
from tests.fixtures.drafter import CORRECTED, REF_36, TARGET, config

WEIGHTS = read_weights(CORRECTED)
REAL_TARGET = read_target(str(TARGET))


def check(
    changes: dict[str, Any] | None = None,
    *,
    drop: tuple[str, ...] = (),
    target: TargetFiles | None = REAL_TARGET,
    ref: bool = False,
    weights: WeightsInfo | None = WEIGHTS,
    k: int | None = None,
) -> CheckResult:
    """The corrected config with top-level ``changes`` applied and keys in ``drop`` removed."""
    data = config(CORRECTED) | (changes or {})
    for key in drop:
        data.pop(key)
    drafter = DrafterFiles(name="t", config=data, weights=weights)
    entry = load_registry().resolve(REF_36) if ref else None
    return validate_drafter(drafter, target, entry, None, k)


def dflash(**values: Any) -> dict[str, Any]:
    return {"dflash_config": config(CORRECTED)["dflash_config"] | values}


def finding(result: CheckResult, key: str) -> Any:
    return next(f for f in result.findings if f.key == key)


def test_baseline_is_clean() -> None:
    result = check()
    assert result.summary.status == "clean"


@pytest.mark.parametrize(
    ("n", "count", "ids"),
    [(64, 5, [1, 16, 31, 46, 61]), (36, 5, [1, 9, 17, 25, 33]), (64, 1, [32]), (8, 2, [1, 5])],
)
def test_even_spread_is_z_labs_rule(n: int, count: int, ids: list[int]) -> None:
    assert even_spread(n, count) == ids


# -- layer types and window -----------------------------------------------------------------


def test_layer_types_length_must_match_layers() -> None:
    result = check({"layer_types": ["sliding_attention"] * 4})
    assert finding(result, "layer_types").expected == "5 entries (num_hidden_layers)"


def test_unknown_layer_type_is_an_error() -> None:
    result = check({"layer_types": ["sliding_attention"] * 4 + ["linear_attention"]})
    assert finding(result, "layer_types").severity == "error"
    assert "linear_attention" in finding(result, "layer_types").found


def test_a_sliding_layer_needs_a_window() -> None:
    result = check(drop=("sliding_window",))
    assert finding(result, "sliding_window").severity == "error"
    assert check({"sliding_window": None}).keys("error") == {"sliding_window"}


def test_swa_window_size_is_read_first_and_satisfies_the_window() -> None:
    result = check(dflash(swa_window_size=2048), drop=("sliding_window",))
    assert result.summary.status == "clean"
    assert "use_sliding_window" not in {f.key for f in result.findings}


def test_use_sliding_window_false_hides_the_window_from_transformers() -> None:
    assert finding(check({"use_sliding_window": False}), "use_sliding_window").severity == "warning"
    assert "use_sliding_window" not in {f.key for f in check({"use_sliding_window": True}).findings}


def test_missing_layer_types_is_a_note_for_a_registry_free_check() -> None:
    result = check(drop=("layer_types",))
    assert finding(result, "layer_types").severity == "info"


# -- target layer ids ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ids", "severity", "words"),
    [
        ([1, 16, 16, 46, 61], "error", "strictly increasing"),
        ([46, 16, 1, 31, 61], "error", "strictly increasing"),
        ([1, 16, 31, 46, 64], "error", "0..63"),
        ([-1, 16, 31, 46, 61], "error", "0..63"),
        ([0, 15, 30, 45, 60], "warning", "[1, 16, 31, 46, 61]"),
        ([1, 5, 9, 13, 17], "warning", "[1, 16, 31, 46, 61]"),
        ([1, 16, 32, 46, 61], None, ""),
        ([], "error", "non-empty"),
        ("1,16,31", "error", "non-empty"),
        ([1.0, 16, 31, 46, 61], "error", "non-empty"),
    ],
)
def test_target_layer_ids(ids: Any, severity: str | None, words: str) -> None:
    result = check(dflash(target_layer_ids=ids), weights=None)
    found = [f for f in result.findings if f.key == "dflash_config.target_layer_ids"]
    if severity is None:
        assert not found
        return
    assert found[0].severity == severity
    assert words in found[0].expected


def test_missing_ids_warn_with_z_labs_fallback() -> None:
    data = config(CORRECTED)
    del data["dflash_config"]["target_layer_ids"]
    result = validate_drafter(DrafterFiles("t", data, weights=WEIGHTS), REAL_TARGET)
    f = finding(result, "dflash_config.target_layer_ids")
    assert f.severity == "warning" and "[1, 16, 31, 46, 61]" in f.expected


def test_fc_width_must_be_ids_times_target_hidden() -> None:
    result = check(dflash(target_layer_ids=[1, 21, 41, 61]))
    f = finding(result, "fc.weight")
    assert f.severity == "error"
    assert "20480" in f.expected and "5 target layers" in f.why


def test_ids_outside_the_reference_target_without_a_target_config() -> None:
    result = check(dflash(target_layer_ids=[1, 16, 31, 46, 70]), target=None, ref=True)
    f = finding(result, "dflash_config.target_layer_ids")
    assert f.check == "registry+target"
    assert "expected ids in 0..63 (64 layers, reference target Qwen/Qwen3.6-27B)" in f.why


# -- pairing with the target -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"num_target_layers": 48}, "num_target_layers"),
        ({"hidden_size": 4096}, "hidden_size"),
        ({"vocab_size": 151936}, "vocab_size"),
        ({"target_hidden_size": 4096}, "target_hidden_size"),
    ],
)
def test_pairing_with_the_target(changes: dict[str, Any], key: str) -> None:
    result = check(changes, weights=None)
    assert finding(result, key).severity == "error"


def test_target_fields_are_read_from_text_config_or_top_level() -> None:
    flat = TargetFiles("flat", {"num_hidden_layers": 64, "hidden_size": 5120, "vocab_size": 248320})
    assert check(target=flat).summary.status == "clean"
    broken = TargetFiles("broken", {"text_config": {"num_hidden_layers": "64"}})
    result = check(target=broken)
    assert finding(result, "target.text_config.num_hidden_layers").severity == "warning"


# -- mask token ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "severity", "found"),
    [
        (248070, None, ""),
        (248068, "warning", '"<think>"'),  # an added token text can contain
        (151669, "error", "ordinary text"),
        (248100, "warning", "past the tokenizer's last id (248070)"),
        (248320, "error", "248320"),
        (-3, "error", "-3"),
        ("248070", "error", '"248070"'),
    ],
)
def test_mask_token(mask: Any, severity: str | None, found: str) -> None:
    result = check(dflash(mask_token_id=mask))
    hits = [f for f in result.findings if f.key == "dflash_config.mask_token_id"]
    if severity is None:
        assert not hits
        return
    assert hits[0].severity == severity
    assert found in hits[0].found


def test_mask_token_without_any_tokenizer_is_a_note() -> None:
    result = check(target=None)
    assert finding(result, "dflash_config.mask_token_id").severity == "info"


def test_mask_token_fallback_key_warns() -> None:
    data = config(CORRECTED)
    del data["dflash_config"]["mask_token_id"]
    data["pard_token"] = 248070
    result = validate_drafter(DrafterFiles("t", data, weights=WEIGHTS), REAL_TARGET)
    assert finding(result, "dflash_config.mask_token_id").severity == "warning"


def test_missing_dflash_config_is_one_error_not_three() -> None:
    result = check(drop=("dflash_config",), weights=None)
    assert result.keys("error") == {"dflash_config"}


def test_tokenizer_json_names_ordinary_ids(tmp_path: Path) -> None:
    vocab = {f"t{i}": i for i in range(100)}
    tokenizer = {
        "added_tokens": [
            {"id": 100, "content": "<|mask|>", "special": True},
            {"id": 101, "content": "<think>", "special": False},
        ],
        "model": {"type": "BPE", "vocab": vocab},
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<think>"}))
    info = read_tokenizer(tmp_path)
    assert info is not None
    kinds = [info.classify(i) for i in (5, 100, 101, 102)]
    # mask_token names <think> special even though added_tokens says otherwise
    assert kinds == ["ordinary", "special", "special", "unused"]


# -- block size and k ------------------------------------------------------------------------


def test_k_must_not_exceed_block_size_minus_one() -> None:
    assert check(k=15).summary.status == "clean"
    f = finding(check(k=16), "num_speculative_tokens")
    assert (f.severity, f.expected) == ("error", "<= 15 (block_size - 1)")


def test_block_size_in_dflash_config_counts() -> None:
    result = check(dflash(block_size=8), drop=("block_size",), k=8)
    assert finding(result, "num_speculative_tokens").expected == "<= 7 (block_size - 1)"


def test_two_different_block_sizes_are_an_error() -> None:
    assert finding(check(dflash(block_size=8)), "block_size").severity == "error"


def test_no_block_size_warns_only_when_k_needs_it() -> None:
    assert finding(check(drop=("block_size",)), "block_size").severity == "info"
    assert finding(check(drop=("block_size",), k=15), "block_size").severity == "warning"


# -- architecture and the weights ------------------------------------------------------------


@pytest.mark.parametrize(
    ("arch", "severity"),
    [
        (None, "error"),
        (["Qwen3ForCausalLM"], "error"),
        (["MyDFlashDrafter"], "warning"),
        (["DFlash2DraftModel"], "info"),
    ],
)
def test_architecture(arch: Any, severity: str) -> None:
    result = check(
        {"architectures": arch} if arch else None, drop=() if arch else ("architectures",)
    )
    assert finding(result, "architectures").severity == severity


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        (
            {"num_hidden_layers": 4, "layer_types": ["sliding_attention"] * 3 + ["full_attention"]},
            "num_hidden_layers",
        ),
        ({"num_attention_heads": 40}, "num_attention_heads"),
        ({"num_key_value_heads": 4}, "num_key_value_heads"),
        ({"intermediate_size": 13824}, "intermediate_size"),
        ({"hidden_size": 4096}, "fc.weight"),
    ],
)
def test_config_must_describe_the_weights(changes: dict[str, Any], key: str) -> None:
    result = check(changes, target=None)
    f = finding(result, key)
    assert f.severity == "error" and f.check.startswith("weights")


def test_no_weights_is_a_note() -> None:
    assert finding(check(weights=None), "weights").severity == "info"


def test_fixture_target_reads_from_disk() -> None:
    drafter = read_drafter(str(CORRECTED))
    assert REAL_TARGET.text_value("num_hidden_layers") == 64
    assert drafter.tokenizer is None and REAL_TARGET.tokenizer is not None
    assert REAL_TARGET.tokenizer.classify(248070) == "special"
