"""``drafter check`` on published drafter and target configs (tests/fixtures/drafter/public):
each real pair is clean, each single seeded mistake is caught with a message naming the key,
the expected and found values and why; the registry's provenance; finding a reference through
the target; and what vLLM runs for ``dflash_config.use_swa``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter import DrafterFiles, check_paths, load_registry, read_target
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.keys import set_path
from dflashops.drafter.result import CheckResult, Finding
from dflashops.drafter.safetensors import header_bytes, read_weights
from dflashops.drafter.validate import validate_drafter
from tests.fixtures.drafter import CORRECTED, HERE, REF_36, TARGET
from tests.fixtures.drafter.public.make_public import generated_files

PUBLIC = HERE / "public"
Q8, Q35, Q122 = (
    "z-lab/Qwen3-8B-DFlash-b16",
    "z-lab/Qwen3.5-27B-DFlash",
    "z-lab/Qwen3.5-122B-A10B-DFlash",
)


@dataclass(frozen=True)
class Pair:
    drafter: Path
    target: Path
    entry: str
    k: int  # num_speculative_tokens: block_size - 1

    @property
    def id(self) -> str:
        return self.drafter.name


PAIRS = {
    p.id: p
    for p in (
        Pair(PUBLIC / "qwen3-8b-dflash-b16-zlab", PUBLIC / "qwen3-8b-target", Q8, 15),
        Pair(PUBLIC / "qwen3-8b-dflash-b16-speculators", PUBLIC / "qwen3-8b-target", Q8, 15),
        Pair(PUBLIC / "qwen35-27b-dflash-zlab", PUBLIC / "qwen35-27b-target", Q35, 15),
        Pair(CORRECTED, TARGET, REF_36, 15),
        Pair(PUBLIC / "qwen35-122b-a10b-dflash-zlab", PUBLIC / "qwen35-122b-a10b-target", Q122, 15),
    )
}


def check_pair(pair: Pair, drafter: Path | None = None, **kwargs: Any) -> CheckResult:
    return check_paths(str(drafter or pair.drafter), target=str(pair.target), **kwargs).result


def config_of(directory: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((directory / "config.json").read_text())
    return data


# -- the fixtures themselves -----------------------------------------------------------------


def test_committed_public_fixtures_equal_the_generator() -> None:
    for rel, data in generated_files().items():
        assert (PUBLIC / rel).read_bytes() == data, f"{rel} is stale: run make_public"


def test_every_fixture_file_names_its_source() -> None:
    sources = json.loads((PUBLIC / "sources.json").read_text())
    files = {
        str(p.relative_to(PUBLIC))
        for p in PUBLIC.rglob("*")
        if p.is_file() and p.parent != PUBLIC and "__pycache__" not in p.parts
    }
    assert files == set(sources)
    kinds = {"verbatim", "trimmed", "converted", "assembled", "generated"}
    for name, source in sources.items():
        assert source["kind"] in kinds and source["what"], name
        if source["kind"] in {"verbatim", "converted", "assembled"}:
            assert source["source"].startswith("https://"), name


# -- real pairs are clean --------------------------------------------------------------------


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
def test_a_real_pair_is_clean_found_by_its_target(pair: Pair) -> None:
    run = check_paths(str(pair.drafter), target=str(pair.target), k=pair.k)
    assert run.match is not None and (run.match.by, run.match.entry.name) == ("target", pair.entry)
    assert run.result.summary.status == "clean", [
        (f.key, f.found) for f in run.result.findings if f.severity != "info"
    ]
    note = next(f for f in run.result.findings if f.key == "ref")
    assert pair.entry in note.found and "matches the target of" in note.why


# speculators 0.9.0 writes sliding_window_non_causal: false for z-lab's full-attention drafter,
# and vLLM 0.32 turns that into causal masks on every layer (vllm-project/vllm#56692)
CAUSAL_ON_VLLM = {"qwen3-8b-dflash-b16-speculators"}


@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
def test_a_real_pair_is_clean_against_its_reference_and_engine(pair: Pair) -> None:
    result = check_pair(pair, ref=pair.entry, k=pair.k, engine=parse_engine("vllm==0.32.0"))
    name = pair.drafter.name
    expected = "warnings" if name in CAUSAL_ON_VLLM else "clean"
    assert result.summary.status == expected, [(f.key, f.found) for f in result.findings]
    if name in CAUSAL_ON_VLLM:
        warned = [f.key for f in result.findings if f.severity == "warning"]
        assert warned == ["engine.sliding_window_non_causal"]


def test_redhats_drafter_is_not_held_to_z_labs_for_the_same_target() -> None:
    """A published drafter for Qwen3-8B that z-lab did not train (blocks of 8, a 32000-token
    draft vocabulary): the target fits z-lab's entry, its reduced vocabulary says it is another
    drafter, so it is checked without a reference and is clean."""
    run = check_paths(
        str(PUBLIC / "redhat-qwen3-8b-speculator-dflash"), target=str(PUBLIC / "qwen3-8b-target")
    )
    assert run.match is None
    assert run.result.summary.status == "clean"
    note = next(f for f in run.result.findings if f.key == "ref")
    assert "reduced vocabulary of 32000" in note.found and Q8 in note.why


# -- each seeded mistake is caught -----------------------------------------------------------


Mutation = Callable[[dict[str, Any]], None]


def put(path: str, value: Any) -> Mutation:
    return lambda data: set_path(data, path, value)


def drop(key: str) -> Mutation:
    return lambda data: data.pop(key)


@dataclass(frozen=True)
class Mistake:
    pair: str
    change: Mutation
    key: str
    expected: str
    found: str
    why: str
    severity: str = "error"
    also: frozenset[str] = frozenset()  # other keys the same mistake breaks, as engines see it


Z8, S8, Z35, Z36, Z122 = (
    "qwen3-8b-dflash-b16-zlab",
    "qwen3-8b-dflash-b16-speculators",
    "qwen35-27b-dflash-zlab",
    CORRECTED.name,
    "qwen35-122b-a10b-dflash-zlab",
)
IDS_SPEC = "aux_hidden_state_layer_ids (read as target_layer_ids = id - 1)"
MISTAKES = {
    # z-lab/Qwen3-8B-DFlash-b16, found through its target
    "8b-mask-is-a-special-token": Mistake(
        Z8,
        put("dflash_config.mask_token_id", 151643),
        "dflash_config.mask_token_id",
        "151669",
        "151643",
        "noise",
    ),
    "8b-mask-two-past": Mistake(
        Z8,
        put("dflash_config.mask_token_id", 151670),
        "dflash_config.mask_token_id",
        "151669",
        "151670",
        "noise",
    ),
    "8b-ids-copied-from-gguf": Mistake(
        Z8,
        put("dflash_config.target_layer_ids", [2, 10, 18, 26, 34]),
        "dflash_config.target_layer_ids",
        "[1, 9, 17, 25, 33]",
        "[2, 10, 18, 26, 34]",
        "shifted by one",
    ),
    "8b-block-8": Mistake(Z8, put("block_size", 8), "block_size", "16", "8", "b16"),
    "8b-layer-count": Mistake(
        Z8,
        put("num_hidden_layers", 6),
        "num_hidden_layers",
        "5 (layers 0..4",
        "6",
        "randomly initialised",
    ),
    "8b-no-heads": Mistake(
        Z8,
        put("num_attention_heads", 0),
        "num_attention_heads",
        "an integer >= 1",
        "0",
        "Engines build the drafter",
    ),
    "8b-kv-heads": Mistake(
        Z8,
        put("num_key_value_heads", 3),
        "num_key_value_heads",
        "a divisor of num_attention_heads (32)",
        "3",
        "Grouped-query",
    ),
    "8b-head-dim": Mistake(
        Z8,
        put("head_dim", -128),
        "head_dim",
        "an integer >= 1",
        "-128",
        "Engines build the drafter",
    ),
    "8b-quoted-eps": Mistake(
        Z8, put("rms_norm_eps", "1e-6"), "rms_norm_eps", "a number", '"1e-6" (a string)', "string"
    ),
    "8b-model-type": Mistake(
        Z8, put("model_type", "qwen2"), "model_type", '"qwen3"', '"qwen2"', "Qwen3Config"
    ),
    "8b-model-type-not-a-string": Mistake(
        Z8, put("model_type", 3), "model_type", '"qwen3"', "3", "string"
    ),
    "8b-hidden": Mistake(Z8, put("hidden_size", 5120), "hidden_size", "4096", "5120", "embeddings"),
    # a quoted "false" is true to vLLM: every layer slides, and no window is set
    "8b-use-swa-quoted": Mistake(
        Z8,
        put("dflash_config.use_swa", "false"),
        "dflash_config.use_swa",
        "true or false",
        '"false"',
        "truthiness",
        also=frozenset({"dflash_config.swa_window_size"}),
    ),
    "8b-lost-use-swa": Mistake(
        Z8,
        put("dflash_config.swa_window_size", 2048),
        "dflash_config.swa_window_size",
        "use_swa: true",
        "2048, but no layer slides",
        "full attention",
        "warning",
    ),
    # the same drafter in the speculators layout
    "spec-ids-without-the-plus-one": Mistake(
        S8,
        put("aux_hidden_state_layer_ids", [1, 9, 17, 25, 33]),
        IDS_SPEC,
        "[1, 9, 17, 25, 33]",
        "[0, 8, 16, 24, 32]",
        "never seen",
    ),
    "spec-mask": Mistake(
        S8, put("mask_token_id", 151643), "mask_token_id", "151669", "151643", "noise"
    ),
    "spec-layer-count": Mistake(
        S8,
        put("transformer_layer_config.num_hidden_layers", 4),
        "transformer_layer_config.num_hidden_layers",
        "5 (layers 0..4",
        "4",
        "randomly initialised",
        also=frozenset({"transformer_layer_config.layer_types"}),
    ),
    "spec-block": Mistake(S8, put("block_size", 8), "block_size", "16", "8", "b16"),
    "spec-vocab": Mistake(
        S8,
        put("transformer_layer_config.vocab_size", 152064),
        "transformer_layer_config.vocab_size",
        "151936",
        "152064",
        "vocabulary",
    ),
    # z-lab/Qwen3.5-27B-DFlash
    "35-given-36s-layout": Mistake(
        Z35,
        put("layer_types", ["sliding_attention"] * 4 + ["full_attention"]),
        "layer_types",
        '["full_attention", "full_attention"',
        '["sliding_attention"',
        "trained all full attention",
        also=frozenset({"sliding_window"}),
    ),
    "35-given-122bs-mask": Mistake(
        Z35,
        put("dflash_config.mask_token_id", 248077),
        "dflash_config.mask_token_id",
        "248070",
        "248077",
        "noise",
    ),
    "35-four-ids": Mistake(
        Z35,
        put("dflash_config.target_layer_ids", [1, 21, 41, 61]),
        "dflash_config.target_layer_ids",
        "[1, 16, 31, 46, 61]",
        "[1, 21, 41, 61]",
        "never seen",
    ),
    "35-block-in-two-places": Mistake(
        Z35,
        put("dflash_config.block_size", 8),
        "block_size",
        "one block size",
        "dflash_config.block_size=8",
        "different lengths",
    ),
    # z-lab/Qwen3.6-27B-DFlash (the incident's corrected fixture)
    "36-all-full": Mistake(
        Z36,
        put("layer_types", ["full_attention"] * 5),
        "layer_types",
        '["sliding_attention"',
        '["full_attention"',
        "attend differently",
    ),
    "36-8bs-mask": Mistake(
        Z36,
        put("dflash_config.mask_token_id", 151669),
        "dflash_config.mask_token_id",
        "248070",
        "151669",
        "noise",
    ),
    "36-no-window": Mistake(
        Z36, drop("sliding_window"), "sliding_window", "2048", "(missing)", "ValueError"
    ),
    # z-lab/Qwen3.5-122B-A10B-DFlash: no certain reference values, the rules alone catch these
    "122b-layer-count": Mistake(
        Z122,
        put("num_hidden_layers", 5),
        "num_hidden_layers",
        "6 (layers 0..5",
        "5",
        "randomly initialised",
    ),
    "122b-five-ids": Mistake(
        Z122,
        put("dflash_config.target_layer_ids", [1, 12, 24, 36, 45]),
        "fc.weight",
        "5 ids × 3072",
        "[3072, 24576]",
        "8 target layers",
    ),
    "122b-block": Mistake(
        Z122,
        put("dflash_config.block_size", 1),
        "dflash_config.block_size",
        "an integer >= 2",
        "1",
        "block_size - 1",
    ),
    "122b-mask-past-vocab": Mistake(
        Z122,
        put("dflash_config.mask_token_id", 248320),
        "dflash_config.mask_token_id",
        "an id below 248320",
        "248320",
        "embedding lookup",
    ),
    "122b-ids-past-target": Mistake(
        Z122,
        put("dflash_config.target_layer_ids", [1, 7, 14, 20, 26, 32, 39, 48]),
        "dflash_config.target_layer_ids",
        "ids in 0..47",
        "[48]",
        "no hidden state",
    ),
}


def _pair_of(name: str) -> Pair:
    return PAIRS[name]


@pytest.mark.parametrize("mistake", MISTAKES.values(), ids=MISTAKES.keys())
def test_a_single_seeded_mistake_is_caught(tmp_path: Path, mistake: Mistake) -> None:
    pair = _pair_of(mistake.pair)
    # a copy under a name nothing matches: the reference comes from the target, as in the incident
    drafter = tmp_path / "my-drafter"
    shutil.copytree(pair.drafter, drafter)
    if mistake.pair == S8:  # keep the "-b16" the folder name carries, so the name check runs
        drafter = drafter.rename(tmp_path / "qwen3-8b-dflash-b16-mine")
    data = config_of(drafter)
    mistake.change(data)
    (drafter / "config.json").write_text(json.dumps(data))
    result = check_pair(pair, drafter)
    found = [f for f in result.findings if f.key == mistake.key]
    assert found, f"{mistake.key} not reported: {[(f.key, f.severity) for f in result.findings]}"
    f: Finding = found[0]
    assert f.severity == mistake.severity
    assert mistake.expected in f.expected, f.expected
    assert mistake.found in f.found, f.found
    assert mistake.why in f.why and len(f.why) > 40, f.why
    others = {g.key for g in result.findings if g.severity == "error"} - {mistake.key}
    assert others <= mistake.also | {"fc.weight"}, others


# -- the registry's provenance -----------------------------------------------------------------


REGISTRY = load_registry()


def test_every_certain_value_names_a_public_source_an_operator_can_open() -> None:
    for entry in REGISTRY.entries:
        for value in entry.keys:
            described = [entry.sources[s] for s in value.sources]
            assert not any("reference/vllm-dflash.md" in d for d in described), entry.name
            if value.certain and entry.name.startswith("z-lab/"):
                assert any(d.startswith("https://") for d in described), (entry.name, value.path)


def test_the_8b_drafters_mask_and_layers_are_certain_from_independent_copies() -> None:
    entry = REGISTRY.resolve(Q8)
    for path, value in (
        ("dflash_config.mask_token_id", 151669),
        ("dflash_config.target_layer_ids", [1, 9, 17, 25, 33]),
    ):
        known = entry.value(path)
        assert known is not None and (known.value, known.certain) == (value, True)
        repos = {entry.sources[s].split("/")[3] for s in known.sources}
        assert {
            "vllm-project",
            "Lev-Stambler",
            "ggml-org",
        } <= repos  # speculators, mlc-llm, llama.cpp


def test_248070_is_not_the_qwen35_familys_mask() -> None:
    masks = {
        name: REGISTRY.resolve(name).value("dflash_config.mask_token_id")
        for name in (Q35, REF_36, Q122)
    }
    assert {n: m.value for n, m in masks.items() if m} == {
        Q35: 248070,
        REF_36: 248070,
        Q122: 248077,
    }
    q35_mask = masks[Q35]
    assert q35_mask is not None and "248077" in q35_mask.note
    all_full = REGISTRY.resolve(Q35).value("layer_types")
    assert all_full is not None and all_full.certain and len(all_full.sources) >= 2


def test_a_registry_finding_links_its_sources() -> None:
    data = config_of(CORRECTED) | {"layer_types": ["full_attention"] * 5}
    drafter = DrafterFiles("t", data)
    result = validate_drafter(drafter, read_target(str(TARGET)), REGISTRY.resolve(REF_36))
    why = next(f.why for f in result.findings if f.key == "layer_types")
    assert "https://github.com/Luce-Org/lucebox/pull/94" in why
    assert "https://github.com/z-lab/dflash/issues/126" in why


# -- a reference through the target -------------------------------------------------------------


def test_a_target_two_entries_fit_and_nothing_names_asks_for_ref(tmp_path: Path) -> None:
    target = tmp_path / "target"
    shutil.copytree(TARGET, target)  # the 3.6-27B target under a name that says nothing
    run = check_paths(str(PAIRS[Z36].drafter), target=str(target))
    assert run.match is None
    ask = next(f for f in run.result.findings if f.key == "ref")
    assert ask.severity == "warning"
    assert Q35 in ask.expected and REF_36 in ask.expected and "--ref" in ask.expected
    assert run.result.exit_code == 3


def test_the_hub_cache_folder_of_the_target_names_it(tmp_path: Path) -> None:
    target = tmp_path / "hub" / "models--Qwen--Qwen3.5-27B" / "snapshots" / "abc"
    shutil.copytree(TARGET, target)  # same shape; the hub folder says Qwen3.5-27B
    run = check_paths(str(PUBLIC / Z35), target=str(target))
    assert run.match is not None and run.match.entry.name == Q35
    assert run.result.summary.status == "clean"


def test_weights_of_another_shape_are_another_drafter(tmp_path: Path) -> None:
    """The same target, but 8 target layers in fc (the 122B layout on the 8B target): not
    z-lab's 8B drafter, so its different mask is not an error."""
    drafter = tmp_path / "d"
    shutil.copytree(PUBLIC / Z8, drafter)
    data = config_of(drafter)
    data["dflash_config"]["target_layer_ids"] = [1, 5, 9, 14, 18, 22, 27, 31]
    data["dflash_config"]["mask_token_id"] = 151670
    (drafter / "config.json").write_text(json.dumps(data))
    weights = read_weights(drafter)
    assert weights is not None
    wide = {
        name: (t.dtype, (4096, 8 * 4096) if name == "fc.weight" else t.shape)
        for name, t in weights.tensors.items()
    }
    (drafter / "model.safetensors").write_bytes(header_bytes(wide))
    run = check_paths(str(drafter), target=str(PUBLIC / "qwen3-8b-target"))
    assert run.match is None
    note = next(f for f in run.result.findings if f.key == "ref")
    assert note.severity == "info" and "fc.weight reads 32768" in note.found
    assert "dflash_config.mask_token_id" not in run.result.keys("error")


# -- dflash_config.use_swa: what vLLM 0.32 runs ---------------------------------------------------


def test_use_swa_runs_every_layer_as_non_causal_sliding_attention() -> None:
    run = check_paths(str(PUBLIC / "mimo-v2.5-pro-fp4-dflash-use-swa"))
    note = next(f for f in run.result.findings if f.key == "dflash_config.use_swa")
    assert note.found == "true; every layer: non-causal sliding window (2048)"
    assert not any("non-causal full" in f.why for f in run.result.findings)
    assert not any(f.key == "layer_types" for f in run.result.findings)


def _modelopt_swa(**dflash: Any) -> dict[str, Any]:
    """NVIDIA ModelOpt's SWA export (PR #1960): layer_types all full, use_swa on, causal off."""
    data = config_of(PUBLIC / Z8)
    data["layer_types"] = ["full_attention"] * 5
    data["dflash_config"] |= {"use_swa": True, "swa_window_size": 1024, "causal": False} | dflash
    return data


def test_use_swa_over_an_all_full_layer_types_still_slides() -> None:
    drafter = DrafterFiles("t", _modelopt_swa())
    result = validate_drafter(drafter, engine=parse_engine("vllm==0.24.0"))
    note = next(f for f in result.findings if f.key == "dflash_config.use_swa")
    assert "non-causal sliding window (1024)" in note.found
    assert "layer_types lists no sliding_attention layer" in note.why
    assert "engine.layer_types" in result.keys("error")  # vLLM <= 0.24 ignores it
    assert validate_drafter(drafter, engine=parse_engine("vllm==0.32.0")).summary.status == "clean"


def test_use_swa_without_a_window_is_the_error_vllm_raises() -> None:
    data = _modelopt_swa()
    del data["dflash_config"]["swa_window_size"]
    result = validate_drafter(DrafterFiles("t", data))
    f = next(f for f in result.findings if f.key == "dflash_config.swa_window_size")
    assert f.severity == "error" and "ValueError" in f.why and "use_swa" in f.why


def test_a_window_shorter_than_the_block_warns() -> None:
    result = validate_drafter(DrafterFiles("t", _modelopt_swa(swa_window_size=8)))
    f = next(f for f in result.findings if f.key == "dflash_config.swa_window_size")
    assert (f.severity, f.expected) == ("warning", ">= 16 (block_size)")


def test_use_swa_next_to_sliding_layer_types_is_ignored_by_vllm() -> None:
    data = config_of(CORRECTED)
    data["dflash_config"]["use_swa"] = True
    result = validate_drafter(DrafterFiles("t", data))
    f = next(f for f in result.findings if f.key == "dflash_config.use_swa")
    assert f.severity == "info" and "ignores use_swa" in f.why


@pytest.mark.parametrize(
    "target_config",
    [
        {"architectures": "Qwen3ForCausalLM", "num_hidden_layers": 36},
        {"architectures": [1, None], "text_config": [1, 2]},
        {
            "architectures": ["Qwen3ForCausalLM"],
            "num_hidden_layers": 36,
            "hidden_size": 4096,
            "vocab_size": 151936,
            "layer_types": "full_attention",
        },
        {
            "architectures": ["Qwen3_5ForConditionalGeneration"],
            "text_config": {
                "num_hidden_layers": 64,
                "hidden_size": 5120,
                "vocab_size": 248320,
                "full_attention_interval": 0,
                "_name_or_path": 7,
            },
        },
        {"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": True, "hidden_size": 4096.0},
    ],
)
def test_a_malformed_target_config_never_breaks_the_match(
    tmp_path: Path, target_config: dict[str, Any]
) -> None:
    (tmp_path / "config.json").write_text(json.dumps(target_config))
    run = check_paths(str(PUBLIC / Z8), target=str(tmp_path))
    assert run.match is None
    assert not any(f.key == "ref" for f in run.result.findings)
