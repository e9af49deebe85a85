"""DSpark on TorchSpec's GLM-5.2 draft config (tests/fixtures/drafter/families/dspark): its
top-level keys are read where vLLM and SGLang read them, so its real defect shows (the mask id
is GLM's pad token, an error once the target's tokenizer is there) instead of a missing
``dflash_config``; the Markov head, the class and the engine versions that run DSpark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter import DrafterFiles, check_paths, read_target
from dflashops.drafter.checks_dspark import dspark_key, dspark_view
from dflashops.drafter.engine import DrafterShape, engine_findings, parse_engine
from dflashops.drafter.families import CheckInputs, detect_family
from dflashops.drafter.methods import validate_method
from dflashops.drafter.result import CheckResult, Finding
from dflashops.drafter.validate import validate_drafter
from tests.fixtures.drafter import HERE

FIXTURES = HERE / "families" / "dspark"
DRAFTER = FIXTURES / "torchspec-glm52-dspark"
TARGET = FIXTURES / "glm52-target"
MASK = "mask_token_id"


def config_of(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "config.json").read_text())
    return data


def finding(result: CheckResult, key: str) -> Finding:
    return next(f for f in result.findings if f.key == key)


def check(data: dict[str, Any], target: Path | None = TARGET, **kwargs: Any) -> CheckResult:
    files = DrafterFiles("glm52-dspark", data)
    return validate_drafter(
        files, read_target(str(target)) if target else None, family="dspark", **kwargs
    )


def test_every_fixture_file_names_its_source() -> None:
    sources = json.loads((FIXTURES / "sources.json").read_text())
    files = {
        str(p.relative_to(FIXTURES))
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.parent != FIXTURES
    }
    assert files == set(sources)


def test_torchspecs_config_is_dspark() -> None:
    assert detect_family(config_of(DRAFTER)) == "dspark"
    # TorchSpec's Qwen3-8B DSpark config keeps the DFlash class name: the Markov head says DSpark
    base = {"architectures": ["DFlashDraftModel"], "model_type": "dflash", "markov_rank": 256}
    assert detect_family(base) == "dspark"


# -- the verdict on the real config ---------------------------------------------------------------


def test_the_pad_placeholder_mask_is_an_error_with_the_targets_tokenizer() -> None:
    """The defect lightseekorg/TorchSpec#133's review found: 154820 is GLM's pad token."""
    run = check_paths(str(DRAFTER), target=str(TARGET))
    result = run.result
    hit = finding(result, MASK)
    assert hit.severity == "error"
    assert (
        hit.expected
        == "a reserved mask id, not a padding/placeholder token of the target tokenizer"
    )
    assert hit.found == '154820 = "<|endoftext|>", the target\'s pad_token_id'
    assert "TorchSpec#133" in hit.why and "padding" in hit.why
    assert result.exit_code == 4
    # the keys it keeps at the top level are read: no finding about a missing dflash_config
    assert not any(f.key.startswith("dflash_config") for f in result.findings)


def test_without_the_tokenizer_the_targets_pad_token_id_still_warns(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(TARGET / "config.json", target / "config.json")
    hit = finding(check(config_of(DRAFTER), target), MASK)
    assert hit.severity == "warning" and "pad_token_id" in hit.found


def test_without_a_target_the_mask_is_only_a_note() -> None:
    assert finding(check(config_of(DRAFTER), None), MASK).severity == "info"


def test_a_reserved_mask_id_passes_the_padding_rule() -> None:
    """Another id than the pad token: past the one added token the fixture's tokenizer lists, so
    only a note that the tokenizer cannot confirm it."""
    result = check(config_of(DRAFTER) | {MASK: 154856})
    assert finding(result, MASK).severity != "error"


def test_its_num_target_layers_is_the_tap_count_sglang_refuses() -> None:
    """TorchSpec writes the tap count (5) where SGLang expects a layer count above every id."""
    hit = finding(check(config_of(DRAFTER)), "num_target_layers")
    assert (hit.severity, hit.found) == ("error", "5")
    assert hit.expected == "> 75 (every target_layer_ids entry must be below it); the target has 78"


def test_the_taps_are_read_from_the_top_level() -> None:
    data = config_of(DRAFTER) | {"target_layer_ids": [1, 20, 38, 56, 78]}
    hit = finding(check(data), "target_layer_ids")
    assert hit.severity == "error" and "78" in hit.found


def test_a_playbooks_dspark_method_runs_these_rules() -> None:
    drafter = DrafterFiles("glm52-dspark", config_of(DRAFTER))
    inputs = CheckInputs(drafter=drafter, target=read_target(str(TARGET)))
    result = validate_method("dspark", inputs)
    assert finding(result, MASK).severity == "error"
    assert "method" not in {f.key for f in result.findings}  # no "no rules yet" note


# -- the layout -----------------------------------------------------------------------------------


def test_the_view_nests_what_the_engines_read_and_names_it_back() -> None:
    config = config_of(DRAFTER)
    view = dspark_view(config)
    assert view["dflash_config"] == {
        "mask_token_id": 154820,
        "target_layer_ids": [1, 20, 38, 56, 75],
    }
    assert dspark_key("dflash_config.mask_token_id", config) == MASK
    assert dspark_key("dflash_config.target_layer_ids", config) == "target_layer_ids"
    nested = config | {"dflash_config": {"mask_token_id": 9}}
    assert dspark_key("dflash_config.mask_token_id", nested) == "dflash_config.mask_token_id"
    assert dspark_view(nested)["dflash_config"]["mask_token_id"] == 9  # nested first, as read


def test_a_speculators_layout_dspark_reads_aux_ids_minus_one() -> None:
    config = {
        "speculators_model_type": "dspark",
        "transformer_layer_config": {"hidden_size": 6144, "num_hidden_layers": 5},
        "aux_hidden_state_layer_ids": [2, 21],
        "mask_token_id": 7,
        "markov_rank": 256,
    }
    view = dspark_view(config)
    assert view["dflash_config"]["target_layer_ids"] == [1, 20]
    assert view["hidden_size"] == 6144
    key = dspark_key("dflash_config.target_layer_ids", config)
    assert key == "aux_hidden_state_layer_ids (read as target_layer_ids = id - 1)"
    assert dspark_key("num_hidden_layers", config) == "transformer_layer_config.num_hidden_layers"


# -- the Markov head and the class ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "key", "found"),
    [
        ({"markov_rank": 0}, "markov_rank", "0"),
        ({"markov_rank": "256"}, "markov_rank", '"256"'),
        ({"markov_head_type": "lstm"}, "markov_head_type", '"lstm"'),
    ],
)
def test_the_markov_head_sglang_refuses(changes: dict[str, Any], key: str, found: str) -> None:
    hit = finding(check(config_of(DRAFTER) | changes), key)
    assert (hit.severity, hit.found) == ("error", found)
    assert "SGLang" in hit.why


def test_a_missing_markov_rank_is_an_error() -> None:
    data = {k: v for k, v in config_of(DRAFTER).items() if k != "markov_rank"}
    data["architectures"] = ["Qwen3DSparkModel"]
    assert finding(check(data), "markov_rank").found == "(missing)"


@pytest.mark.parametrize(
    ("architectures", "model_type", "severity"),
    [
        (["DSparkDraftModel"], "dspark", "warning"),  # SGLang builds it; vLLM takes it for DSv4
        (["DSparkDraftModel"], "qwen3", None),
        (["Qwen3DSparkModel"], "dspark", None),
        (["DSparkV41DraftModel"], "dspark", "warning"),  # another family's DSpark
        (["DFlashDraftModel"], "dflash", "error"),  # no Markov head built
    ],
)
def test_the_dspark_class(architectures: list[str], model_type: str, severity: str | None) -> None:
    result = check(config_of(DRAFTER) | {"architectures": architectures, "model_type": model_type})
    hits = [f for f in result.findings if f.key == "architectures"]
    assert [f.severity for f in hits] == ([severity] if severity else [])


# -- engines --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "key", "expected"),
    [
        ("vllm==0.24.0", "engine", "vllm>=0.25.0 or sglang>=0.5.16"),
        ("sglang==0.5.15", "engine", "vllm>=0.25.0 or sglang>=0.5.16"),
        (
            "sglang==0.5.16",
            "engine.architectures",
            "sglang>=0.5.17, or architectures [Qwen3DSparkModel]",
        ),
        (
            "sglang==0.5.17",
            "engine.mask_token_id",
            "sglang>=0.5.18, or the id in dflash_config.mask_token_id",
        ),
        ("vllm==0.33.0", "engine.architectures", '["Qwen3DSparkModel"]'),
        ("vllm==0.34.0", "engine.architectures", '["Qwen3DSparkModel"]'),
    ],
)
def test_an_engine_that_cannot_run_this_dspark_config(engine: str, key: str, expected: str) -> None:
    hit = finding(check(config_of(DRAFTER), engine=parse_engine(engine)), key)
    assert hit.severity == "error" and expected in hit.expected


def test_sglang_reading_top_level_keys_runs_it() -> None:
    result = check(config_of(DRAFTER), engine=parse_engine("sglang==0.5.18"))
    assert not any(f.key.startswith("engine") for f in result.findings)


def test_vllm_034_maps_a_qwen3_dspark_draft_model() -> None:
    shape = DrafterShape(architectures=("DSparkDraftModel",), model_type="qwen3")
    assert engine_findings(parse_engine("vllm==0.34.0"), shape, "dspark") == ([], {})
    found, _ = engine_findings(parse_engine("vllm==0.33.0"), shape, "dspark")
    assert [f.key for f in found] == ["engine.architectures"]
