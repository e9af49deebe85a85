"""DFlash2 on published configs (tests/fixtures/drafter/families/dflash2): recognised by its
fields and weight modules, each real pair clean against its reference, each seeded mistake caught
with the key, the expected and found values and why; the engine versions that run it; and the
DFlash rule DFlash2 shares that issue 33 corrected (``num_target_layers``), on a published z-lab
config whose count is off by one."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter import DrafterFiles, check_paths, load_registry, read_target
from dflashops.drafter.checks_dflash2 import dflash2_view
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.families import CheckInputs, detect_family, weights_family
from dflashops.drafter.keys import set_path
from dflashops.drafter.methods import family_for, validate_method
from dflashops.drafter.result import CheckResult, Finding
from dflashops.drafter.safetensors import header_bytes, read_weights
from dflashops.drafter.validate import validate_drafter
from tests.fixtures.drafter import HERE

FIXTURES = HERE / "families" / "dflash2"
PUBLIC = HERE / "public"
Q38, GLM53 = "z-lab/Qwen3.8-27B-DFlash2", "incoai/GLM-5.3-Flash-DFlash2"
REGISTRY = load_registry()


def config_of(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "config.json").read_text())
    return data


def with_weights(tmp_path: Path) -> Path:
    """z-lab's reference fixture with ``model.safetensors`` written from its published header."""
    drafter = tmp_path / "zlab-dflash2"
    shutil.copytree(FIXTURES / "zlab-dflash2-reference", drafter)
    header = json.loads((drafter / "safetensors-header.json").read_text())
    tensors = {name: (t["dtype"], tuple(t["shape"])) for name, t in header.items()}
    (drafter / "model.safetensors").write_bytes(header_bytes(tensors))
    return drafter


def finding(result: CheckResult, key: str) -> Finding:
    return next(f for f in result.findings if f.key == key)


# -- the fixtures and the family ------------------------------------------------------------------


def test_every_fixture_file_names_its_source() -> None:
    sources = json.loads((FIXTURES / "sources.json").read_text())
    files = {
        str(p.relative_to(FIXTURES))
        for p in FIXTURES.rglob("*")
        if p.is_file() and p.parent != FIXTURES
    }
    assert files == set(sources)
    assert all(s["kind"] in {"verbatim", "trimmed", "assembled"} for s in sources.values())


def test_the_header_rewritten_from_the_published_one_has_its_offsets(tmp_path: Path) -> None:
    """The fixture keeps z-lab's data_offsets: ours, written from the shapes, are the same."""
    published = json.loads(
        (FIXTURES / "zlab-dflash2-reference" / "safetensors-header.json").read_text()
    )
    raw = (with_weights(tmp_path) / "model.safetensors").read_bytes()
    written = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    written.pop("__metadata__", None)
    assert written == published


@pytest.mark.parametrize(
    "folder", ["zlab-dflash2-reference", "qwen38-27b-dflash2", "glm53-flash-dflash2"]
)
def test_published_dflash2_configs_are_dflash2(folder: str) -> None:
    assert detect_family(config_of(FIXTURES / folder)) == "dflash2"


def test_dflash2_is_told_by_its_fields_alone() -> None:
    """A DFlash class name with the selector's fields is still DFlash2 (SGLang switches the
    modules on by the fields); the placeholder ``version: 2`` nobody writes is not."""
    config = config_of(FIXTURES / "qwen38-27b-dflash2") | {"architectures": ["DFlashDraftModel"]}
    assert detect_family(config) == "dflash2"
    plain = {"architectures": ["DFlashDraftModel"], "dflash_config": {"version": 2}}
    assert detect_family(plain) == "dflash"
    assert detect_family({"speculators_model_type": "dflash2"}) == "dflash2"


def test_the_weights_tell_dflash2(tmp_path: Path) -> None:
    weights = read_weights(with_weights(tmp_path))
    assert weights is not None
    assert weights_family(weights.tensors) == "dflash2"
    assert weights_family(["fc.weight", "layers.0.mlp.up_proj.weight"]) is None


def test_a_playbooks_dflash_method_is_checked_as_dflash2() -> None:
    drafter = DrafterFiles("q38", config_of(FIXTURES / "qwen38-27b-dflash2"))
    inputs = CheckInputs(drafter=drafter)
    assert family_for("dflash", inputs) == "dflash2"
    result = validate_method("dflash", inputs)
    assert "architectures" not in result.keys("error")


# -- real pairs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    drafter: str
    target: str
    ref: str
    k: int  # block_size - 1


PAIRS = {
    "qwen38": Pair("qwen38-27b-dflash2", "qwen38-27b-target", Q38, 7),
    "glm53": Pair("glm53-flash-dflash2", "glm53-flash-target", GLM53, 7),
}


def check_pair(pair: Pair, drafter: Path | None = None, **kwargs: Any) -> CheckResult:
    return check_paths(
        str(drafter or FIXTURES / pair.drafter),
        target=str(FIXTURES / pair.target),
        ref=pair.ref,
        **kwargs,
    ).result


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS)
def test_a_real_pair_is_clean_against_its_reference_and_engine(pair: Pair) -> None:
    for engine in ("vllm==0.28.0", "vllm==0.34.0", "sglang==0.5.19"):
        result = check_pair(pair, engine=parse_engine(engine), k=pair.k)
        assert result.summary.status == "clean", (engine, result.findings)


def test_the_reference_fixture_is_clean_with_its_weights(tmp_path: Path) -> None:
    result = check_paths(str(with_weights(tmp_path))).result
    assert result.summary.status == "clean", result.findings


# -- seeded mistakes ------------------------------------------------------------------------------

Edit = Callable[[dict[str, Any]], None]


def put(path: str, value: Any) -> Edit:
    return lambda data: set_path(data, path, value)


def drop(path: str) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for part in parents:
            node = node[part]
        node.pop(last)

    return edit


@dataclass(frozen=True)
class Mistake:
    pair: str
    edit: Edit
    key: str
    expected: str
    found: str
    why: str


MISTAKES = {
    "no-selector-top-k": Mistake(
        "qwen38",
        drop("dflash_config.selector_top_k"),
        "dflash_config.selector_top_k",
        "16",
        "(missing)",
        "KeyError",
    ),
    "selector-rank-a-string": Mistake(
        "glm53",
        put("dflash_config.selector_rank", "256"),
        "dflash_config.selector_rank",
        "a positive integer",
        '"256"',
        "selector",
    ),
    "group-size-not-dividing-hidden": Mistake(
        "qwen38",
        put("dflash_config.conv_group_size", 24),
        "dflash_config.conv_group_size",
        "16",
        "24",
        "must divide hidden_size",
    ),
    "dflash-class-for-dflash2-files": Mistake(
        "qwen38",
        put("architectures", ["DFlashDraftModel"]),
        "architectures",
        "DFlash2DraftModel",
        "DFlashDraftModel",
        "no candidate selector",
    ),
    "v1-spread-taps": Mistake(
        "qwen38",
        put("dflash_config.target_layer_ids", [1, 16, 31, 46, 61]),
        "dflash_config.target_layer_ids",
        "[5, 19, 33, 47, 61]",
        "[1, 16, 31, 46, 61]",
        "silently reads the wrong layers",
    ),
    "v1-block-of-16": Mistake(
        "glm53",
        put("dflash_config.block_size", 16),
        "dflash_config.block_size",
        "8",
        "16",
        "must not exceed 7",
    ),
    "block-moved-to-top-level": Mistake(
        "qwen38",
        lambda data: data.update(
            block_size=16,
            dflash_config={k: v for k, v in data["dflash_config"].items() if k != "block_size"},
        ),
        "block_size",
        "8",
        "16",
        "must not exceed 7",
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES.values(), ids=MISTAKES)
def test_a_single_seeded_mistake_is_caught(tmp_path: Path, mistake: Mistake) -> None:
    pair = PAIRS[mistake.pair]
    drafter = tmp_path / pair.drafter
    shutil.copytree(FIXTURES / pair.drafter, drafter)
    data = config_of(drafter)
    mistake.edit(data)
    (drafter / "config.json").write_text(json.dumps(data))
    result = check_pair(pair, drafter)
    hit = finding(result, mistake.key)
    assert hit.severity == "error", result.findings
    assert mistake.expected in hit.expected and mistake.found in hit.found
    assert mistake.why in hit.why
    assert result.exit_code == 4


def test_k_above_the_block_is_the_error_the_k_ceiling_names() -> None:
    result = check_pair(PAIRS["qwen38"], k=8)
    hit = finding(result, "num_speculative_tokens")
    assert (hit.severity, hit.expected, hit.found) == ("error", "<= 7 (block_size - 1)", "8")


@pytest.mark.parametrize(
    ("name", "shape", "expected"),
    [
        ("candidate_selector.hidden_projection.weight", (128, 6656), "[256, 6656]"),
        ("layers.0.attention_conv.kernel_projection.weight", (832, 6656), "[1664, 6656]"),
        ("layers.0.mlp_conv.base_kernel", (2, 3, 6656), "[2, 2, 6656]"),
    ],
)
def test_weights_the_fields_do_not_describe(
    tmp_path: Path, name: str, shape: tuple[int, ...], expected: str
) -> None:
    drafter = with_weights(tmp_path)
    weights = read_weights(drafter)
    assert weights is not None
    tensors = {n: (t.dtype, shape if n == name else t.shape) for n, t in weights.tensors.items()}
    (drafter / "model.safetensors").write_bytes(header_bytes(tensors))
    hit = finding(check_paths(str(drafter)).result, name)
    assert (hit.severity, hit.expected) == ("error", expected)
    assert "do not describe these weights" in hit.why


def test_a_missing_module_is_an_error(tmp_path: Path) -> None:
    drafter = with_weights(tmp_path)
    weights = read_weights(drafter)
    assert weights is not None
    tensors = {
        n: (t.dtype, t.shape)
        for n, t in weights.tensors.items()
        if not n.startswith("candidate_selector.")
    }
    (drafter / "model.safetensors").write_bytes(header_bytes(tensors))
    hit = finding(check_paths(str(drafter)).result, "weights")
    assert hit.severity == "error" and "candidate_selector" in hit.expected


def test_dflash2_weights_under_a_dflash_config_are_caught(tmp_path: Path) -> None:
    """The config lost its DFlash2 class and fields: engines would build a first-generation
    drafter and drop the selector and convolutions the weights hold."""
    drafter = with_weights(tmp_path)
    data = config_of(drafter)
    data["architectures"] = ["DFlashDraftModel"]
    for field in ("conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"):
        data["dflash_config"].pop(field)
    (drafter / "config.json").write_text(json.dumps(data))
    result = check_paths(str(drafter)).result
    hit = finding(result, "architectures")
    assert hit.severity == "error"
    assert "candidate selector" in hit.found and "DFlash2DraftModel" in hit.expected


def test_a_speculators_layout_dflash2_is_read_as_vllm_reads_it() -> None:
    """vLLM's speculators adapter (update_dflash2) moves the four fields into dflash_config."""
    config = {
        "speculators_model_type": "dflash2",
        "transformer_layer_config": {"hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 32},
        "aux_hidden_state_layer_ids": [2, 4],
        "mask_token_id": 7,
        "conv_kernel_size": 2,
        "conv_group_size": 16,
        "selector_rank": 8,
        "selector_top_k": 4,
    }
    view = dflash2_view(config)
    assert view["architectures"] == ["DFlash2DraftModel"]
    assert view["dflash_config"]["target_layer_ids"] == [1, 3]
    assert view["dflash_config"]["selector_rank"] == 8
    drafter = DrafterFiles("spec", dict(config))
    del config["selector_top_k"]
    result = validate_drafter(DrafterFiles("spec", config), family="dflash2")
    assert finding(result, "selector_top_k").severity == "error"
    assert validate_drafter(drafter, family="dflash2").keys("error") == set()


# -- engines --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "engine", ["vllm==0.27.1", "vllm==0.20.0", "sglang==0.5.18", "sglang==0.5.11"]
)
def test_an_engine_that_cannot_run_dflash2_is_refused_naming_what_can(engine: str) -> None:
    result = check_pair(PAIRS["qwen38"], engine=parse_engine(engine))
    hit = finding(result, "engine")
    assert hit.severity == "error" and hit.found == engine
    assert (
        hit.expected == "vllm>=0.28.0 or sglang>=0.5.19 (llama.cpp: since ggml-org/llama.cpp#27342)"
    )
    assert "DFlash2DraftModel" in hit.why


def test_a_dflash_drafter_is_not_held_to_dflash2s_engine_floor() -> None:
    target = read_target(str(PUBLIC / "qwen3-8b-target"))
    drafter = DrafterFiles("z8", config_of(PUBLIC / "qwen3-8b-dflash-b16-zlab"))
    result = validate_drafter(drafter, target, engine=parse_engine("vllm==0.26.0"))
    assert "engine" not in result.keys("error")


# -- num_target_layers: what the DFlash loaders do with it ---------------------------------------

LEGACY = PUBLIC / "zlab-35b-a3b-dflash-legacy"
TARGET_40 = PUBLIC / "qwen36-35b-a3b-target"


def test_num_target_layers_41_on_a_40_layer_target_is_a_warning() -> None:
    """z-lab's published 35B-A3B drafter says 41 for a 40-layer target; no loader reads it while
    every tap (the last is 37) is inside the target, so it is at most a warning."""
    result = check_paths(str(LEGACY), target=str(TARGET_40)).result
    hit = finding(result, "num_target_layers")
    assert (hit.severity, hit.expected, hit.found) == ("warning", "40 (target config)", "41")
    assert "z-lab/dflash#156, #157" in hit.why and "SGLang" in hit.why
    assert "dflash_config.target_layer_ids" not in result.keys("error")


def test_num_target_layers_at_or_below_a_tap_is_the_error_sglang_raises(tmp_path: Path) -> None:
    drafter = tmp_path / "d"
    shutil.copytree(LEGACY, drafter)
    data = config_of(drafter) | {"num_target_layers": 37}
    (drafter / "config.json").write_text(json.dumps(data))
    hit = finding(check_paths(str(drafter), target=str(TARGET_40)).result, "num_target_layers")
    assert hit.severity == "error" and hit.expected.startswith("> 37")
    assert "out-of-range layer id" in hit.why


def test_num_target_layers_off_the_target_without_taps_is_an_error(tmp_path: Path) -> None:
    """Without target_layer_ids the taps are spread over num_target_layers (z-lab's fallback
    before #157, SGLang's): over the wrong count the drafter reads the wrong layers."""
    drafter = tmp_path / "d"
    shutil.copytree(LEGACY, drafter)
    data = config_of(drafter)
    del data["dflash_config"]["target_layer_ids"]
    (drafter / "config.json").write_text(json.dumps(data))
    hit = finding(check_paths(str(drafter), target=str(TARGET_40)).result, "num_target_layers")
    assert hit.severity == "error" and "spread" in hit.why
