"""The bundled reference entries, their provenance rules, and how drafters are matched."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter import DrafterFiles, load_registry
from dflashops.drafter.registry import CERTAIN_BASES, load_entry, offered_registry
from dflashops.drafter.safetensors import TensorInfo, WeightsInfo
from dflashops.errors import DrafterError
from tests.fixtures.drafter import REF_36

REGISTRY = load_registry()


def entry_json(name: str = REF_36) -> dict[str, Any]:
    entry = REGISTRY.resolve(name)
    data: dict[str, Any] = json.loads(Path(entry.file).read_text())
    return data


def test_bundled_entries() -> None:
    """The DFlash-lineage entries, each under its family (other families add their own)."""
    families = {e.name: e.family for e in REGISTRY.entries}
    assert {
        name: families.get(name)
        for name in (
            "z-lab/Qwen3.6-27B-DFlash",
            "z-lab/Qwen3.5-27B-DFlash",
            "z-lab/Qwen3-8B-DFlash-b16",
            "z-lab/Qwen3.5-122B-A10B-DFlash",
            "z-lab/Qwen3-4B-DFlash-b16",
            "z-lab/Qwen3-Coder-30B-A3B-DFlash",
            "z-lab/gemma-4-31B-it-DFlash",
            "z-lab/Qwen3.8-27B-DFlash2",
            "incoai/GLM-5.3-Flash-DFlash2",
            "RedHatAI/GLM-5.2-speculator.dspark",
        )
    } == {
        "z-lab/Qwen3.6-27B-DFlash": "dflash",
        "z-lab/Qwen3.5-27B-DFlash": "dflash",
        "z-lab/Qwen3-8B-DFlash-b16": "dflash",
        "z-lab/Qwen3.5-122B-A10B-DFlash": "dflash",
        "z-lab/Qwen3-4B-DFlash-b16": "dflash",
        "z-lab/Qwen3-Coder-30B-A3B-DFlash": "dflash",
        "z-lab/gemma-4-31B-it-DFlash": "dflash",
        "z-lab/Qwen3.8-27B-DFlash2": "dflash2",
        "incoai/GLM-5.3-Flash-DFlash2": "dflash2",
        "RedHatAI/GLM-5.2-speculator.dspark": "dspark",
    }


def test_every_checkpoint_family_has_bundled_references() -> None:
    """Each family with a checkpoint has published entries to compare against; the MTP and
    draft-model entries are the targets and draft pairs their rules were read against."""
    by_family: dict[str, set[str]] = {}
    for entry in REGISTRY.entries:
        by_family.setdefault(entry.family, set()).add(entry.name)
    assert {"deepseek-ai/DeepSeek-V3", "zai-org/GLM-4.5-Air"} <= by_family["mtp"]
    assert "Qwen/Qwen3-Next-80B-A3B-Instruct" in by_family["mtp"]
    assert {"Qwen/Qwen3-4B", "meta-llama/Llama-3.2-3B"} <= by_family["draft_model"]
    assert "meta-llama/Llama-3.2-1B-Instruct" in by_family["draft_model"]
    assert "SpecForge/qwen3-4b-eagle3" in by_family["eagle3"]
    assert "yuhuili/EAGLE-LLaMA3-Instruct-8B" in by_family["eagle"]
    assert set(by_family) >= {"dflash", "dflash2", "dspark", "eagle3", "eagle", "mtp"}
    assert sum(map(len, by_family.values())) >= 20


LAB_REF = "dflashops-lab/tiny-qwen3-dflash"


def test_the_labs_entry_answers_a_ref_only() -> None:
    """The lab offers its tiny drafter through the entry point: a playbook's ``drafter.ref``
    resolves it, while ``find`` (what launch asks before naming a ref to a container's preflight,
    whose wheel has no lab) and matching by name never see it."""
    entry = REGISTRY.resolve(LAB_REF)
    assert Path(entry.file).parent.name == "registry"
    assert Path(entry.file).parent.parent.name == "lab"
    assert REGISTRY.resolve("tiny-qwen3-dflash") == entry  # its alias, like a bundled entry's
    assert REGISTRY.find(LAB_REF) is None
    assert offered_registry().find(LAB_REF) == entry
    files = DrafterFiles("tiny-qwen3-dflash", {}, path="/opt/lab/models/tiny-qwen3-dflash")
    assert REGISTRY.match(files) is None


def test_every_value_has_provenance_and_certainty_follows_the_rule() -> None:
    for entry in (*REGISTRY.entries, *offered_registry().entries):
        third_party = entry.name.startswith("z-lab/")
        # the z-lab values come from third-party sources, never the original file
        assert ("NOT read" in entry.provenance) == third_party
        for value in entry.keys:
            assert value.sources and value.why
            assert all(s in entry.sources for s in value.sources)
            if value.certain:
                assert value.basis in CERTAIN_BASES
                assert value.basis in {"structural", "original"} or len(value.sources) >= 2
                assert value.basis != "original" or not third_party


def certain(name: str) -> set[str]:
    return {v.path for v in REGISTRY.resolve(name).keys if v.certain}


def test_which_keys_are_certain() -> None:
    assert {
        "layer_types",
        "sliding_window",
        "dflash_config.mask_token_id",
        "dflash_config.target_layer_ids",
    } <= certain(REF_36)
    assert "intermediate_size" not in certain(REF_36)
    assert "layer_types" in certain("z-lab/Qwen3.5-27B-DFlash")
    # three independent public copies agree on the 8B drafter's mask and target layers; its
    # layer count differs between them (5 and 4), so it is not certain
    eight = certain("z-lab/Qwen3-8B-DFlash-b16")
    assert {"dflash_config.mask_token_id", "dflash_config.target_layer_ids", "block_size"} <= eight
    assert "num_hidden_layers" not in eight
    mask = REGISTRY.resolve("Qwen3-8B-DFlash-b16").value("dflash_config.mask_token_id")
    assert mask is not None and (mask.value, mask.certain, len(mask.sources)) == (151669, True, 3)
    assert certain("z-lab/Qwen3.5-122B-A10B-DFlash") == {"architectures"}


def test_the_36_values_from_the_notes() -> None:
    e = REGISTRY.resolve(REF_36)
    values = {v.path: v.value for v in e.keys}
    assert values["layer_types"] == ["sliding_attention"] * 4 + ["full_attention"]
    assert values["dflash_config.mask_token_id"] == 248070
    assert values["dflash_config.target_layer_ids"] == [1, 16, 31, 46, 61]
    assert values["sliding_window"] == 2048
    assert (e.target.num_hidden_layers, e.target.hidden_size, e.target.vocab_size) == (
        64,
        5120,
        248320,
    )


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(extra=1), "unknown field 'extra'"),
        (lambda d: d["keys"]["layer_types"].update(sources=["lucebox-pr94"]), "certain needs"),
        (lambda d: d["keys"]["layer_types"].update(basis="single"), "certain needs"),
        (lambda d: d["keys"]["layer_types"].update(sources=["nobody"]), "unknown source"),
        (lambda d: d["keys"]["block_size"].update(read_from=["x"]), "must include block_size"),
        (lambda d: d["keys"]["sliding_window"].update(when="always"), "when"),
        (lambda d: d["keys"]["layer_types"].pop("value"), "has no value"),
        (lambda d: d.update(schema=2), "schema"),
        (lambda d: d.update(fingerprints={"md5:x": "y"}), "fingerprints"),
    ],
)
def test_loader_is_strict(tmp_path: Path, mutate: Any, message: str) -> None:
    data = entry_json()
    mutate(data)
    path = tmp_path / "entry.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DrafterError, match=message):
        load_entry(path)


def test_a_user_entry_cannot_reuse_a_bundled_name(tmp_path: Path) -> None:
    (tmp_path / "dup.json").write_text(json.dumps(entry_json()))
    with pytest.raises(DrafterError, match="also used"):
        load_registry([tmp_path])


def test_resolve_by_name_short_name_or_file_and_unknown(tmp_path: Path) -> None:
    assert REGISTRY.resolve("qwen3.6-27b-dflash").name == REF_36
    data = entry_json() | {"name": "me/mine"}
    (tmp_path / "mine.json").write_text(json.dumps(data))
    assert REGISTRY.resolve(str(tmp_path / "mine.json")).name == "me/mine"
    with pytest.raises(DrafterError, match="no reference drafter"):
        REGISTRY.resolve("nobody/nothing")


def test_a_fingerprint_shared_by_two_entries_matches_neither(tmp_path: Path) -> None:
    weights = WeightsInfo({"fc.weight": TensorInfo("fc.weight", "BF16", (4, 8), "m")}, ("m",))
    for name in ("a/one", "b/two"):
        data = entry_json() | {"name": name, "fingerprints": {weights.fingerprint: "test"}}
        (tmp_path / f"{name.replace('/', '_')}.json").write_text(json.dumps(data))
    registry = load_registry([tmp_path])
    assert registry.match(DrafterFiles("x", {}, weights=weights)) is None
