"""``drafter check`` on published EAGLE-3 and EAGLE drafters (tests/fixtures/drafter/families/
eagle): each real pair is clean, SpecForge's Qwen3-4B drafter (issue 33) is judged as the EAGLE-3
drafter it is, and each single seeded mistake is caught with its key, the expected and found
values and why, at the severity the engine gives it."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dflashops.drafter import check_paths
from dflashops.drafter.checks_eagle_layers import (
    default_aux_layers,
    sglang_capture,
    trained_capture,
)
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.families import detect_family
from dflashops.drafter.keys import set_path
from dflashops.drafter.result import CheckResult, Finding
from dflashops.drafter.safetensors import header_bytes, read_weights
from tests.fixtures.drafter import HERE
from tests.fixtures.drafter.families.eagle.make_eagle import generated_files

EAGLE = HERE / "families" / "eagle"
PUBLIC = HERE / "public"
QWEN4_TARGET, LLAMA_TARGET, QWEN8_TARGET = (
    EAGLE / "qwen3-4b-target",
    EAGLE / "llama31-8b-target",
    PUBLIC / "qwen3-8b-target",
)


@dataclass(frozen=True)
class Pair:
    drafter: str
    target: Path | None
    ref: str | None
    method: str | None = None  # None: the drafter's files say their family

    @property
    def path(self) -> Path:
        return EAGLE / self.drafter


PAIRS = {
    p.drafter: p
    for p in (
        Pair("specforge-qwen3-4b-eagle3", QWEN4_TARGET, "SpecForge/qwen3-4b-eagle3"),
        Pair("specforge-qwen3-8b-eagle3", QWEN8_TARGET, "SpecForge/qwen3-8b-eagle3"),
        Pair("specforge-llama31-8b-eagle3", LLAMA_TARGET, "SpecForge/llama3-8B-eagle3"),
        Pair("speculators-qwen3-8b-eagle3", QWEN8_TARGET, None),
        Pair(
            "eagle3-llama31-instruct-8b-training",
            LLAMA_TARGET,
            "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "eagle3",
        ),
        Pair("eagle-llama3-instruct-8b", None, "yuhuili/EAGLE-LLaMA3-Instruct-8B", "eagle"),
    )
}
Q4 = PAIRS["specforge-qwen3-4b-eagle3"]


def check(pair: Pair, drafter: Path | None = None, **kwargs: Any) -> CheckResult:
    kwargs.setdefault("method", pair.method)
    target = str(pair.target) if pair.target is not None else None
    return check_paths(str(drafter or pair.path), target=target, **kwargs).result


def problems(result: CheckResult) -> list[tuple[str, str, str]]:
    return [(f.severity, f.key, f.found) for f in result.findings if f.severity != "info"]


# -- the fixtures themselves -----------------------------------------------------------------


def test_committed_fixtures_equal_the_generator() -> None:
    for rel, data in generated_files().items():
        assert (EAGLE / rel).read_bytes() == data, f"{rel} is stale: run make_eagle"


def test_every_fixture_file_names_its_source() -> None:
    sources = json.loads((EAGLE / "sources.json").read_text())
    files = {
        str(p.relative_to(EAGLE))
        for p in EAGLE.rglob("*")
        if p.is_file() and p.parent != EAGLE and "__pycache__" not in p.parts
    }
    assert files == set(sources)
    for name, source in sources.items():
        assert source["kind"] in {"verbatim", "converted", "generated"} and source["what"], name
        if source["kind"] != "generated":
            assert source["source"].startswith("https://"), name
        if source["kind"] == "verbatim" and "github.com" in source["source"]:
            assert "/blob/" in source["source"], name  # a commit an operator can open


# -- real pairs are clean ----------------------------------------------------------------------


@pytest.mark.parametrize("engine", [None, "vllm==0.34.0", "vllm==0.32.0"])
@pytest.mark.parametrize("pair", PAIRS.values(), ids=PAIRS.keys())
def test_a_real_pair_is_clean(pair: Pair, engine: str | None) -> None:
    spec = parse_engine(engine) if engine else None
    for ref in {pair.ref, None}:
        result = check(pair, ref=ref, engine=spec)
        assert result.summary.status == "clean", problems(result)


def test_the_issue_case_is_an_eagle3_drafter_and_clean() -> None:
    """SpecForge's Qwen3-4B EAGLE-3 config exited 4 as a broken DFlash drafter
    ("architectures: expected DFlashDraftModel", "dflash_config missing")."""
    assert detect_family(json.loads((Q4.path / "config.json").read_text())) == "eagle3"
    run = check_paths(str(Q4.path), target=str(QWEN4_TARGET))
    assert run.result.exit_code == 0, problems(run.result)
    # never matched through its target to z-lab's Qwen3-4B DFlash drafter (same target)
    assert run.match is None and "ref" not in {f.key for f in run.result.findings}
    assert not {"dflash_config", "dflash_config.mask_token_id"} & {
        f.key for f in run.result.findings
    }
    note = next(f for f in run.result.findings if f.key == "eagle_aux_hidden_state_layer_ids")
    assert note.severity == "info" and "[2, 18, 33]" in note.found  # vLLM's default, Qwen3-4B
    served_as_dflash = check_paths(str(Q4.path), target=str(QWEN4_TARGET), method="dflash")
    assert "architectures" in served_as_dflash.result.keys("error")


def test_a_folder_named_like_the_entry_is_matched(tmp_path: Path) -> None:
    folder = tmp_path / "qwen3-4b-eagle3"
    shutil.copytree(Q4.path, folder)
    run = check_paths(str(folder), target=str(QWEN4_TARGET))
    assert run.match is not None and run.match.entry.name == Q4.ref
    assert run.result.summary.status == "clean"


def test_the_converted_drafter_is_not_held_to_the_dflash_entry_of_its_target() -> None:
    run = check_paths(str(PAIRS["speculators-qwen3-8b-eagle3"].path), target=str(QWEN8_TARGET))
    assert run.match is None and run.result.summary.status == "clean"


def test_a_reference_of_another_family_is_not_compared() -> None:
    result = check(PAIRS["specforge-qwen3-8b-eagle3"], ref="z-lab/Qwen3-8B-DFlash-b16")
    ref = next(f for f in result.findings if f.key == "ref")
    assert ref.severity == "warning" and "a dflash entry" in ref.found
    assert result.keys("error") == set()


def test_sglang_reads_every_layer_id_one_later() -> None:
    """SGLang 0.5.15's and 0.5.16's qwen3.py/llama.py capture id + 1 for every id (a real 0.5.16
    server fed eagle_config [0, 1, 2] the states entering layers 1, 2, 3)."""
    assert default_aux_layers(36) == [2, 18, 33]
    assert sglang_capture([1, 17, 32]) == default_aux_layers(36)
    assert sglang_capture([0, 1, 2]) == [1, 2, 3]
    assert sglang_capture([2, 18, 33]) == [3, 19, 34]  # sglang#25454's fix is not in them
    # what such a drafter was trained on: sglang#25454's two conventions, by the first id
    assert trained_capture([1, 17, 32]) == [2, 18, 33]
    assert trained_capture([2, 18, 33]) == [2, 18, 33]


def test_sglang_warns_of_ids_written_capture_before(tmp_path: Path) -> None:
    """ids whose first is 2 (SGLang's own default written as is, sgl-project/sglang#25454's
    second convention) are fed one layer late by SGLang 0.5.16: a warning with the ids to write;
    the SpecForge convention (first id 1) is quiet."""
    drafter = tmp_path / "drafter"
    shutil.copytree(Q4.path, drafter)
    config = json.loads((drafter / "config.json").read_text())
    config.pop(IDS, None)
    sglang = parse_engine("sglang==0.5.16")

    config["eagle_config"] = {IDS: [2, 18, 33]}
    (drafter / "config.json").write_text(json.dumps(config))
    late = [f for f in check(Q4, drafter, engine=sglang).findings if f.key == f"eagle_config.{IDS}"]
    assert [(f.severity, f.check) for f in late] == [("warning", "layers")]
    assert "feeds [3, 19, 34]" in late[0].found
    assert f"eagle_config.{IDS} = [1, 17, 32]" in late[0].why

    config["eagle_config"] = {IDS: [1, 17, 32]}
    (drafter / "config.json").write_text(json.dumps(config))
    quiet = check(Q4, drafter, engine=sglang)
    assert not [f for f in quiet.findings if f.key == f"eagle_config.{IDS}"]


# -- each seeded mistake is caught ---------------------------------------------------------------

Change = Callable[[dict[str, Any]], None]
TensorChange = Callable[[dict[str, tuple[str, tuple[int, ...]]]], None]


def put(path: str, value: Any) -> Change:
    return lambda data: set_path(data, path, value)


def drop(key: str) -> Change:
    return lambda data: data.pop(key)


def drop_tensor(name: str) -> TensorChange:
    return lambda tensors: tensors.pop(name) and None


def set_tensor(name: str, dtype: str, shape: tuple[int, ...]) -> TensorChange:
    return lambda tensors: tensors.update({name: (dtype, shape)})


@dataclass(frozen=True)
class Mistake:
    pair: str
    key: str
    expected: str
    found: str
    why: str
    change: Change | None = None
    tensors: TensorChange | None = None
    severity: str = "error"
    engine: str | None = None
    ref: bool = False  # with the pair's reference entry (else its rules alone)
    method: str | None = None  # served with this method (else the pair's)
    also: frozenset[str] = field(default_factory=frozenset)


Q4N, Q8N, L8N, S8N, E3N, E1N = PAIRS
IDS = "eagle_aux_hidden_state_layer_ids"
MISTAKES = {
    # SpecForge's own history: its Qwen3-4B config said head_dim 80 (Qwen3-4B's is 128) ...
    "head-dim-80": Mistake(
        Q4N, "head_dim", "4096 rows", "head_dim 80", "fails on shapes", put("head_dim", 80)
    ),
    # ... and tie_word_embeddings true (sgl-project/SpecForge#139): SGLang drops the head
    "tied-head-on-sglang": Mistake(
        Q4N,
        "tie_word_embeddings",
        "false",
        "true",
        "trained [draft_vocab_size] head is dropped",
        put("tie_word_embeddings", True),
        engine="sglang==0.5.11",
    ),
    "tied-head-no-engine": Mistake(
        Q4N,
        "tie_word_embeddings",
        "false",
        "true",
        "never tie",
        put("tie_word_embeddings", True),
        severity="warning",
    ),
    "no-d2t": Mistake(
        Q4N, "d2t", "[32000]", "(missing)", "acceptance collapses", tensors=drop_tensor("d2t")
    ),
    "full-draft-vocab-keeps-d2t": Mistake(
        Q4N,
        "d2t",
        "no d2t",
        "[32000]",
        "nowhere to go",
        put("draft_vocab_size", 151936),
        also=frozenset({"lm_head.weight"}),
    ),
    "draft-vocab-bigger-than-vocab": Mistake(
        Q4N,
        "draft_vocab_size",
        "at most vocab_size",
        "200000",
        "subset",
        put("draft_vocab_size", 200000),
    ),
    "llama-vocab": Mistake(
        Q4N,
        "vocab_size",
        "151936 (target config)",
        "128256",
        "another tokenizer",
        put("vocab_size", 128256),
    ),
    "hidden-of-another-model": Mistake(
        Q4N,
        "hidden_size",
        "2560 (target config)",
        "4096",
        "target_hidden_size",
        put("hidden_size", 4096),
        # the weights were made for 2560: every tensor that reads hidden_size disagrees too
        also=frozenset({"fc.weight", "midlayer.self_attn.q_proj.weight", "lm_head.weight"}),
    ),
    "target-hidden-of-another-model": Mistake(
        Q4N,
        "target_hidden_size",
        "2560 (target config)",
        "4096",
        "first draft step fails",
        put("target_hidden_size", 4096),
        also=frozenset({"fc.weight"}),
    ),
    "ids-copied-as-layer-outputs": Mistake(
        Q4N,
        IDS,
        "[2, 18, 33]",
        "[1, 17, 32]",
        "one layer early",
        put(IDS, [1, 17, 32]),
        severity="warning",
    ),
    "ids-past-the-target": Mistake(
        Q4N, IDS, "capture indices in 0..36", "[40]", "never captured", put(IDS, [2, 18, 40])
    ),
    "ids-repeated": Mistake(
        Q4N, IDS, "distinct layer ids", "[2, 18, 18]", "fewer hidden states", put(IDS, [2, 18, 18])
    ),
    "four-ids-for-a-three-wide-fc": Mistake(
        Q4N,
        IDS,
        "3 layers",
        "4",
        "fails on shapes",
        put(IDS, [2, 10, 18, 33]),
    ),
    "sglang-ids-vllm-ignores": Mistake(
        Q4N,
        "eagle_config.eagle_aux_hidden_state_layer_ids",
        "[2, 12, 22]",
        "[2, 18, 33]",
        "set eagle_aux_hidden_state_layer_ids = [2, 12, 22] at the top level",
        put("eagle_config", {IDS: [1, 11, 21]}),
    ),
    "a-class-vllm-does-not-have": Mistake(
        Q4N,
        "architectures",
        "an eagle3 drafter class vLLM 0.34.0 knows",
        "Eagle3MistralForCausalLM",
        "registry has none of them",
        put("architectures", ["Eagle3MistralForCausalLM"]),
        engine="vllm==0.34.0",
    ),
    "alias-before-vllm-0.11": Mistake(
        Q4N,
        "architectures",
        "Eagle3LlamaForCausalLM",
        "LlamaForCausalLMEagle3",
        "not supported",
        engine="vllm==0.10.0",
        also=frozenset({"engine"}),
    ),
    "vllm-before-eagle3": Mistake(
        Q4N, "engine", "vllm>=0.8.5", "vllm==0.8.0", "no eagle3", engine="vllm==0.8.0"
    ),
    "one-layer-too-many": Mistake(
        Q4N,
        "num_hidden_layers",
        "1 (the decoder layers",
        "2",
        "stay randomly",
        put("num_hidden_layers", 2),
    ),
    "kv-heads": Mistake(
        Q4N,
        "num_key_value_heads",
        "1024 rows",
        "4 heads",
        "fails on shapes",
        put("num_key_value_heads", 4),
    ),
    "llama-special-tokens": Mistake(
        Q4N,
        "bos_token_id",
        "151643",
        "128000",
        "another tokenizer",
        put("bos_token_id", 128000),
        severity="warning",
    ),
    "registry-draft-vocab": Mistake(
        Q4N,
        "draft_vocab_size",
        "32000",
        "64000",
        "SpecForge/qwen3-4b-eagle3: certain",
        put("draft_vocab_size", 64000),
        ref=True,
        also=frozenset({"d2t", "lm_head.weight"}),
    ),
    # the speculators layout
    "speculators-unknown-layer-type": Mistake(
        S8N,
        "transformer_layer_config.model_type",
        "llama",
        "mistral",
        "Unsupported model_type",
        put("transformer_layer_config.model_type", "mistral"),
    ),
    "speculators-without-its-config": Mistake(
        S8N,
        "speculators_config",
        "verifier",
        "(missing)",
        "does not start",
        drop("speculators_config"),
    ),
    "speculators-hidden": Mistake(
        S8N,
        "transformer_layer_config.hidden_size",
        "4096 (target config)",
        "2560",
        "target_hidden_size",
        put("transformer_layer_config.hidden_size", 2560),
        also=frozenset({"fc.weight", "layers.0.self_attn.q_proj.weight", "lm_head.weight"}),
    ),
    "speculators-ids-before-vllm-reads-them": Mistake(
        S8N,
        IDS,
        "[4, 20, 30]",
        "[2, 18, 33]",
        "vLLM 0.32 and 0.34 read these ids",
        put(IDS, [4, 20, 30]),
        engine="vllm==0.11.0",
    ),
    "speculators-ids-a-layer-off-before-vllm-reads-them": Mistake(
        S8N,
        IDS,
        "[3, 19, 34]",
        "[2, 18, 33]",
        "trained on others",
        put(IDS, [3, 19, 34]),
        engine="vllm==0.11.0",
        severity="warning",
    ),
    # Llama-3.1-8B
    "llama-d2t-for-another-draft-vocab": Mistake(
        L8N,
        "d2t",
        "[16000]",
        "[32000]",
        "another draft vocabulary",
        put("draft_vocab_size", 16000),
        also=frozenset({"lm_head.weight"}),
    ),
    "llama-t2d-for-another-vocab": Mistake(
        L8N,
        "t2d",
        "[128256]",
        "[151936]",
        "another tokenizer",
        tensors=set_tensor("t2d", "BOOL", (151936,)),
        severity="warning",
    ),
    "training-config-on-sglang": Mistake(
        E3N,
        "architectures",
        "LlamaForCausalLMEagle3",
        "LlamaForCausalLM",
        "SGLang builds the model class",
        engine="sglang==0.5.11",
    ),
    # EAGLE (1/2)
    "eagle1-hidden": Mistake(
        E1N,
        "hidden_size",
        "4096",
        "5120",
        "2 * hidden_size",
        put("hidden_size", 5120),
        ref=True,
    ),
    "eagle1-qwen2-class": Mistake(
        E1N,
        "architectures",
        "EagleLlamaForCausalLM",
        "Qwen2ForCausalLM",
        "none of them",
        put("architectures", ["Qwen2ForCausalLM"]),
    ),
    "eagle1-fc-bias": Mistake(
        E1N,
        "fc.bias",
        "no bias",
        "present",
        "fails",
        tensors=lambda t: t.update(
            {"fc.weight": ("F16", (4096, 8192)), "fc.bias": ("F16", (4096,))}
        ),
    ),
    "eagle1-bias-by-default": Mistake(
        E1N, "bias", "false", "(missing)", "trains fc with a bias", drop("bias"), severity="warning"
    ),
}


def seeded(pair: Pair, mistake: Mistake, tmp_path: Path) -> Path:
    """A copy of the pair's drafter with the mistake's config and weights changes."""
    folder = tmp_path / f"drafter-{mistake.pair}"
    shutil.copytree(pair.path, folder)
    if mistake.change is not None:
        data = json.loads((folder / "config.json").read_text())
        mistake.change(data)
        (folder / "config.json").write_text(json.dumps(data))
    if mistake.tensors is not None:
        weights = read_weights(folder)
        tensors = {n: (t.dtype, t.shape) for n, t in weights.tensors.items()} if weights else {}
        mistake.tensors(tensors)
        (folder / "model.safetensors").write_bytes(header_bytes(tensors))
    return folder


@pytest.mark.parametrize("name", MISTAKES)
def test_a_seeded_mistake_is_caught(name: str, tmp_path: Path) -> None:
    mistake = MISTAKES[name]
    pair = PAIRS[mistake.pair]
    engine = parse_engine(mistake.engine) if mistake.engine else None
    result = check(
        pair,
        seeded(pair, mistake, tmp_path),
        ref=pair.ref if mistake.ref else None,
        engine=engine,
        method=mistake.method or pair.method,
    )
    finding = next((f for f in result.findings if f.key == mistake.key), None)
    assert finding is not None, problems(result)
    assert finding.severity == mistake.severity, finding
    assert mistake.expected in finding.expected, finding
    assert mistake.found in finding.found, finding
    assert mistake.why in finding.why, finding
    # one mistake, one finding (and what the same change breaks as the engine sees it)
    flagged = {f.key for f in result.findings if f.severity in {"error", "warning"}}
    assert flagged <= {mistake.key, *mistake.also}, problems(result)


def test_a_clean_change_stays_clean(tmp_path: Path) -> None:
    """SGLang-convention ids that name vLLM's default layers: vLLM ignores eagle_config's ids,
    but what it feeds is what the drafter was trained on."""
    same = Mistake(Q4N, "", "", "", "", put("eagle_config", {IDS: [1, 17, 32]}))
    result = check(Q4, seeded(Q4, same, tmp_path))
    assert result.summary.status == "clean", problems(result)


def test_the_tied_head_is_harmless_on_vllm(tmp_path: Path) -> None:
    tied = MISTAKES["tied-head-no-engine"]
    result = check(Q4, seeded(Q4, tied, tmp_path), engine=parse_engine("vllm==0.34.0"))
    assert result.summary.status == "clean"
    assert "tie_word_embeddings" in result.keys("info")


def test_a_tokenizer_of_another_model_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "drafter"
    shutil.copytree(Q4.path, folder)
    llama = {"128000": "<|begin_of_text|>", "151643": "<|reserved_special_token_9|>"}
    decoder = {i: {"content": c, "special": True} for i, c in llama.items()}
    (folder / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}))
    finding = _only(check(Q4, folder), "tokenizer")
    assert finding.severity == "error"
    assert "<|endoftext|>" in finding.expected and "reserved" in finding.found
    assert "another tokenizer" in finding.why


def _only(result: CheckResult, key: str) -> Finding:
    found = [f for f in result.findings if f.key == key]
    assert len(found) == 1, problems(result)
    return found[0]


def test_engine_version_rules() -> None:
    qwen_target = check(Q4, engine=parse_engine("vllm==0.10.0"))
    engine = _only(qwen_target, "engine")
    assert engine.severity == "error" and "'qwen3'" in engine.expected
    assert "only supported" in engine.why
    assert check(Q4, engine=parse_engine("vllm==0.11.0")).summary.status == "clean"
    llama = PAIRS["specforge-llama31-8b-eagle3"]
    # vLLM 0.10 serves EAGLE-3 on a Llama target, but only under the Eagle3-prefixed name
    old = check(llama, engine=parse_engine("vllm==0.10.0"))
    assert old.keys("error") == {"architectures"}
    assert check(PAIRS[E3N], engine=parse_engine("vllm==0.10.0")).summary.status == "clean"


def test_a_target_shared_by_two_families_matches_the_drafter_s_own(tmp_path: Path) -> None:
    """An EAGLE-3 entry that knows its target's layer pattern, next to z-lab's Qwen3-4B DFlash
    entry of the same target: the EAGLE-3 drafter is matched to the EAGLE-3 entry alone, and its
    reduced vocabulary is that entry's own, not evidence of another drafter."""
    bundled = HERE.parents[2] / "dflashops" / "drafter" / "registry"
    entry = json.loads((bundled / "eagle3--SpecForge--qwen3-4b-eagle3.json").read_text())
    entry["name"] = "local/qwen3-4b-eagle3"
    entry.pop("aliases", None)
    entry["target"]["layer_pattern"] = ["full_attention"]
    (tmp_path / "entry.json").write_text(json.dumps(entry))
    run = check_paths(str(Q4.path), target=str(QWEN4_TARGET), registry_paths=[tmp_path])
    assert run.match is not None and run.match.by == "target"
    assert run.match.entry.name == "local/qwen3-4b-eagle3"
    assert run.result.exit_code == 0, problems(run.result)


def test_sglang_ignores_top_level_ids_and_captures_its_default(tmp_path: Path) -> None:
    """A real SGLang 0.5.16 read no top-level ids: a lab drafter naming [1, 2, 3] got its default
    layers, two distinct states of a 4-layer target, and the server died on the first request;
    the same drafter with eagle_config ids [0, 1, 2] served."""
    drafter = tmp_path / "drafter"
    shutil.copytree(Q4.path, drafter)
    config = json.loads((drafter / "config.json").read_text())
    sglang = parse_engine("sglang==0.5.16")

    config[IDS] = [1, 17, 32]  # the drafter says so at the top level only (vLLM's place)
    (drafter / "config.json").write_text(json.dumps(config))
    refused = [f for f in check(Q4, drafter, engine=sglang).findings if f.severity == "error"]
    assert [(f.key, f.found) for f in refused] == [
        (f"eagle_config.{IDS}", "none: SGLang ignores the top level and captures [2, 18, 33]")
    ]
    assert f"eagle_config.{IDS} = [0, 16, 31]" in refused[0].why

    config["eagle_config"] = {IDS: [0, 16, 31]}  # as SGLang reads them
    (drafter / "config.json").write_text(json.dumps(config))
    served = check(Q4, drafter, engine=sglang)
    assert not [f for f in served.findings if f.key == f"eagle_config.{IDS}"]
