"""MTP: the target's own layers as the drafter (``dflashops.drafter.family_mtp``).

The real fixture is DeepSeek-V3's published config.json with a header-only safetensors that
holds its MTP layer's tensor names (``tests/fixtures/drafter/families/mtp``); every seeded mistake
is caught with its key, expected and found values and why. Regenerate the header with
``.venv/bin/python -m tests.unit.test_drafter_mtp``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter.engine import EngineSpec, parse_engine
from dflashops.drafter.families import CheckInputs
from dflashops.drafter.files import DrafterFiles, read_drafter, read_target
from dflashops.drafter.methods import validate_method
from dflashops.drafter.registry import load_registry
from dflashops.drafter.result import CheckResult, Finding
from dflashops.drafter.safetensors import TensorInfo, WeightsInfo, header_bytes

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drafter" / "families" / "mtp"
DEEPSEEK = FIXTURES / "deepseek-v3"
DEEPSEEK_REF = "deepseek-ai/DeepSeek-V3"
VLLM = parse_engine("vllm==0.32.0")


def deepseek_tensors(config: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """DeepSeek-V3's tensors as its README_WEIGHTS.md names them, trimmed: one tensor per main
    layer, and the MTP module (layer num_hidden_layers) with its own parts. BF16 throughout (the
    release is FP8 with scale tensors); only names and shapes are ever read."""
    hidden, vocab, main = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {
        "model.embed_tokens.weight": ("BF16", (vocab, hidden)),
        "model.norm.weight": ("BF16", (hidden,)),
        "lm_head.weight": ("BF16", (vocab, hidden)),
    }
    for i in range(main):
        tensors[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", (hidden,))
    heads_out = config["num_attention_heads"] * config["v_head_dim"]
    for i in range(config["num_nextn_predict_layers"]):
        mtp = f"model.layers.{main + i}"
        tensors |= {
            f"{mtp}.embed_tokens.weight": ("BF16", (vocab, hidden)),
            f"{mtp}.enorm.weight": ("BF16", (hidden,)),
            f"{mtp}.hnorm.weight": ("BF16", (hidden,)),
            f"{mtp}.eh_proj.weight": ("BF16", (hidden, 2 * hidden)),
            f"{mtp}.shared_head.norm.weight": ("BF16", (hidden,)),
            f"{mtp}.shared_head.head.weight": ("BF16", (vocab, hidden)),
            f"{mtp}.input_layernorm.weight": ("BF16", (hidden,)),
            f"{mtp}.self_attn.o_proj.weight": ("BF16", (hidden, heads_out)),
            f"{mtp}.mlp.gate.weight": ("BF16", (config["n_routed_experts"], hidden)),
        }
    return tensors


def generated_files() -> dict[Path, bytes]:
    config = json.loads((DEEPSEEK / "config.json").read_text())
    return {DEEPSEEK / "model.safetensors": header_bytes(deepseek_tensors(config))}


def check(
    drafter: DrafterFiles,
    *,
    engine: EngineSpec | None = VLLM,
    k: int | None = 1,
    params: dict[str, Any] | None = None,
    ref: str | None = None,
) -> CheckResult:
    entry = load_registry().resolve(ref) if ref else None
    inputs = CheckInputs(drafter, None, entry, engine, k, params or {})
    return validate_method("mtp", inputs)


def only(result: CheckResult, key: str) -> Finding:
    hits = [f for f in result.findings if f.key == key]
    assert len(hits) == 1, result.findings
    return hits[0]


def files(config: dict[str, Any], tensors: list[str] | None = None) -> DrafterFiles:
    weights = None
    if tensors is not None:
        infos = {n: TensorInfo(n, "BF16", (1,), "model.safetensors") for n in tensors}
        weights = WeightsInfo(infos, ("model.safetensors",))
    return DrafterFiles("target", config, weights=weights)


def deepseek_config() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DEEPSEEK / "config.json").read_text())
    return data


def ds_files(config: dict[str, Any]) -> DrafterFiles:
    """A DeepSeek-V3-shaped target with the MTP tensors its config declares."""
    return files(config, list(deepseek_tensors(config)))


def test_the_committed_header_is_what_the_generator_writes() -> None:
    for path, data in generated_files().items():
        assert path.read_bytes() == data, f"regenerate: python -m {__name__}"


def test_published_deepseek_v3_is_clean_alone_by_name_and_against_its_entry() -> None:
    drafter = read_drafter(str(DEEPSEEK))
    assert drafter.weights is not None
    alone = check(drafter)
    assert alone.findings == ()
    matched = load_registry().match(drafter)
    assert matched is not None and matched.entry.name == DEEPSEEK_REF
    assert check(drafter, ref=DEEPSEEK_REF).findings == ()
    # launch passes the target as both; the target alone (no weights) says what it skipped
    target = read_target(str(DEEPSEEK))
    only_config = validate_method("mtp", CheckInputs(None, target, None, VLLM, 1, {}))
    assert only_config.keys("info") == {"weights"} and only_config.exit_code == 0


def test_no_mtp_layers_declared_is_an_error() -> None:
    config = deepseek_config()
    del config["num_nextn_predict_layers"]
    f = only(check(files(config)), "num_nextn_predict_layers")
    assert (f.severity, f.found) == ("error", "(missing)")
    assert "number of MTP layers" in f.expected and "does not start" in f.why


def test_zero_mtp_layers_is_an_error() -> None:
    config = deepseek_config() | {"num_nextn_predict_layers": 0}
    f = only(check(files(config)), "num_nextn_predict_layers")
    assert (f.severity, f.expected, f.found) == ("error", "an integer >= 1", "0")


def test_weights_without_the_mtp_layer_are_an_error(tmp_path: Path) -> None:
    """A quantized copy that dropped layer 61: the classic MTP failure."""
    copy = tmp_path / "deepseek-v3-awq"
    copy.mkdir()
    shutil.copy(DEEPSEEK / "config.json", copy / "config.json")
    tensors = deepseek_tensors(deepseek_config())
    kept = {n: t for n, t in tensors.items() if not n.startswith("model.layers.61.")}
    (copy / "model.safetensors").write_bytes(header_bytes(kept))
    f = only(check(read_drafter(str(copy))), "model.layers.61")
    assert (f.severity, f.found) == ("error", "(no such tensor)")
    assert "MTP layer 0 of 1" in f.expected and "missing from checkpoint" in f.why


def test_k_past_the_layers_reuses_them_and_an_uneven_k_is_refused() -> None:
    reuse = only(check(ds_files(deepseek_config()), k=3), "num_speculative_tokens")
    assert (reuse.severity, reuse.expected, reuse.found) == (
        "warning",
        "<= 1 (the MTP layers the target has)",
        "3",
    )
    two = deepseek_config() | {"num_nextn_predict_layers": 2}
    uneven = only(check(ds_files(two), k=3), "num_speculative_tokens")
    assert uneven.severity == "error" and "must be divisible by n_predict=2" in uneven.why
    assert check(ds_files(two), k=2).findings == ()
    assert check(ds_files(two), k=4).keys("warning") == {"num_speculative_tokens"}


def test_the_method_name_each_vllm_release_takes() -> None:
    target = ds_files(deepseek_config())
    old = only(check(target, engine=parse_engine("vllm==0.10.2")), "method")
    assert (old.severity, old.expected, old.found) == ("error", "deepseek_mtp", "mtp")
    legacy = {"method": "deepseek_mtp"}
    assert check(target, engine=parse_engine("vllm==0.10.2"), params=legacy).findings == ()
    renamed = only(check(target, params=legacy), "method")
    assert renamed.severity == "info" and "deprecated" in renamed.why


@pytest.mark.parametrize(
    ("arch", "engine", "severity"),
    [
        ("DeepseekV3ForCausalLM", "vllm==0.8.5", "error"),
        ("Glm4MoeForCausalLM", "vllm==0.9.2", "error"),
        ("Glm4MoeForCausalLM", "vllm==0.10.0", None),
        ("Qwen3NextForCausalLM", "vllm==0.10.1", "error"),
        ("Qwen3NextForCausalLM", "sglang==0.5.1", "error"),
        ("Glm4MoeForCausalLM", "sglang==0.4.10", None),
        ("MiMoForCausalLM", "sglang==0.4.7", "info"),  # between 0.4.6 (without) and 0.4.8 (with)
    ],
)
def test_engine_releases_that_draft_with_the_architecture(
    arch: str, engine: str, severity: str | None
) -> None:
    config = {"architectures": [arch], "num_hidden_layers": 4, "num_nextn_predict_layers": 1}
    result = check(files(config), engine=parse_engine(engine), params={"method": "mtp"})
    found = [f for f in result.findings if f.key == "engine"]
    assert [f.severity for f in found] == ([severity] if severity else [])


def test_qwen35_reads_its_count_under_text_config_and_its_mtp_tensors() -> None:
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "text_config": {"num_hidden_layers": 64, "mtp_num_hidden_layers": 1},
    }
    with_mtp = files(
        config,
        [
            "model.language_model.layers.0.mlp.up_proj.weight",
            "mtp.fc.weight",
            "mtp.layers.0.mlp.up_proj.weight",
        ],
    )
    assert check(with_mtp).findings == ()
    without = files(config, ["model.language_model.layers.0.mlp.up_proj.weight"])
    f = only(check(without), "mtp.layers.0")
    assert f.severity == "error" and "Qwen3.5/3.6" in f.expected
    old = only(check(with_mtp, engine=parse_engine("vllm==0.16.0")), "engine")
    assert (old.severity, old.expected) == ("error", "vllm>=0.17.0")


def test_qwen3_next_without_a_count_builds_one_layer() -> None:
    config = {"architectures": ["Qwen3NextForCausalLM"], "num_hidden_layers": 48}
    result = check(files(config, ["mtp.layers.0.input_layernorm.weight"]))
    note = only(result, "num_nextn_predict_layers")
    assert note.severity == "info" and result.exit_code == 0
    assert check(files(config, ["mtp.layers.0.x"]), k=2).keys("warning") == {
        "num_speculative_tokens"
    }


def test_mimo_layers_are_named_mtp_layers() -> None:
    config = {
        "architectures": ["MiMoForCausalLM"],
        "num_hidden_layers": 36,
        "num_nextn_predict_layers": 1,
    }
    assert check(files(config, ["model.mtp_layers.0.input_layernorm.weight"])).findings == ()
    assert check(files(config, ["model.layers.36.enorm.weight"])).keys("error") == {
        "model.mtp_layers.0"
    }
    sglang = check(files(config, ["model.mtp_layers.0.x"]), engine=parse_engine("sglang==0.5.10"))
    assert sglang.keys("info") == {"speculative_draft_model_path"}


def test_an_architecture_without_facts_is_a_note_unless_it_declares_no_mtp() -> None:
    unknown = {"architectures": ["Ernie4_5_MoeForCausalLM"], "num_nextn_predict_layers": 1}
    note = only(check(files(unknown)), "architectures")
    assert note.severity == "info"
    plain = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32}
    f = only(check(files(plain)), "num_nextn_predict_layers")
    assert f.severity == "error" and "Unsupported speculative method" in f.why


def test_a_value_against_the_entry_is_named_with_its_sources() -> None:
    config = deepseek_config() | {"num_hidden_layers": 60}
    f = only(check(files(config), ref=DEEPSEEK_REF), "num_hidden_layers")
    assert (f.severity, f.expected, f.found) == ("error", "61", "60")
    assert "github.com/deepseek-ai/DeepSeek-V3" in f.why


def test_an_entry_of_another_family_is_not_compared() -> None:
    result = check(files(deepseek_config()), ref="z-lab/Qwen3-8B-DFlash-b16")
    assert only(result, "ref").severity == "info" and result.exit_code == 0


def test_nothing_to_check_is_an_error() -> None:
    result = validate_method("mtp", CheckInputs(None, None, None, VLLM, 1, {}))
    assert result.keys("error") == {"drafter"}


def main() -> None:
    for path, data in generated_files().items():
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
