"""A separate small model drafting for the target (``dflashops.drafter.family_draft_model``).

Real pairs (``tests/fixtures/drafter/families/draft_model``, published configs) check clean; the
real mismatched pair (Qwen2.5-3B for Qwen2.5-32B: 151936 vs 152064 tokens) and every single seeded
mistake are caught with key, expected, found and why. Regenerate the tokenizer configs with
``.venv/bin/python -m tests.unit.test_drafter_draft_model``.
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
from tests.fixtures.drafter.public.make_public import qwen3_tokenizer_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drafter" / "families" / "draft_model"
VLLM = parse_engine("vllm==0.32.0")
# (draft, target, registry entry or None): published configs, clean on vLLM 0.32
PAIRS = [
    ("qwen3-4b-draft", "qwen3-32b-target", "Qwen/Qwen3-4B"),
    ("llama-3.2-3b-draft", "llama-3.1-8b-target", "meta-llama/Llama-3.2-3B"),
    ("llama-3.2-1b-instruct-draft", "llama-3.1-8b-target", "meta-llama/Llama-3.2-1B-Instruct"),
    ("qwen2.5-7b-draft", "qwen2.5-32b-target", None),
]
QWEN3_TOKENIZED = ("qwen3-4b-draft", "qwen3-32b-target")


def generated_files() -> dict[Path, bytes]:
    """Qwen3's added tokens for both Qwen3 models (one tokenizer for the whole family)."""
    data = (json.dumps(qwen3_tokenizer_config(), indent=2, ensure_ascii=False) + "\n").encode()
    return {FIXTURES / folder / "tokenizer_config.json": data for folder in QWEN3_TOKENIZED}


def check(
    draft: DrafterFiles,
    target: str | Path | None,
    *,
    engine: EngineSpec | None = VLLM,
    params: dict[str, Any] | None = None,
    ref: str | None = None,
) -> CheckResult:
    target_files = read_target(str(target)) if target is not None else None
    entry = load_registry().resolve(ref) if ref else None
    inputs = CheckInputs(draft, target_files, entry, engine, 3, params or {})
    return validate_method("draft_model", inputs)


def only(result: CheckResult, key: str) -> Finding:
    hits = [f for f in result.findings if f.key == key]
    assert len(hits) == 1, result.findings
    return hits[0]


def copy_pair(tmp_path: Path, draft: str, target: str) -> tuple[Path, Path]:
    paths = []
    for name in (draft, target):
        shutil.copytree(FIXTURES / name, tmp_path / name)
        paths.append(tmp_path / name)
    return paths[0], paths[1]


def edit_json(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def tokenizer_json(vocab: dict[str, int], merges: list[str] | None = None) -> str:
    model = {"type": "BPE", "vocab": vocab, "merges": merges or ["a b"]}
    return json.dumps({"added_tokens": [], "model": model, "pre_tokenizer": None})


def test_the_committed_tokenizer_configs_are_what_the_generator_writes() -> None:
    for path, data in generated_files().items():
        assert path.read_bytes() == data, f"regenerate: python -m {__name__}"


@pytest.mark.parametrize(("draft", "target", "ref"), PAIRS)
def test_published_pairs_are_clean(draft: str, target: str, ref: str | None) -> None:
    files = read_drafter(str(FIXTURES / draft))
    result = check(files, FIXTURES / target, ref=ref)
    tokenized = draft in QWEN3_TOKENIZED
    assert result.findings == () if tokenized else result.keys("info") == {"tokenizer"}
    assert result.exit_code == 0


def test_the_real_mismatched_pair_is_refused() -> None:
    """Qwen2.5-3B has 151936 rows, Qwen2.5-32B 152064: vLLM refuses the pair at start."""
    files = read_drafter(str(FIXTURES / "qwen2.5-3b-draft"))
    f = only(check(files, FIXTURES / "qwen2.5-32b-target"), "vocab_size")
    assert (f.severity, f.expected, f.found) == ("error", "152064 (the target's)", "151936")
    assert "same vocabulary size" in f.why
    sglang = only(
        check(files, FIXTURES / "qwen2.5-32b-target", engine=parse_engine("sglang==0.5.10")),
        "vocab_size",
    )
    assert sglang.severity == "error" and "does not check" in sglang.why


def test_mapped_vocabularies_are_a_note_on_releases_that_map_them() -> None:
    files = read_drafter(str(FIXTURES / "qwen2.5-3b-draft"))
    target = FIXTURES / "qwen2.5-32b-target"
    # Qwen2.5-3B covers 32768 positions, the 32B serves 131072: served shorter here
    both = {"use_heterogeneous_vocab": True, "max_model_len": 32768}
    mapped = check(files, target, params=both)
    assert only(mapped, "vocab_size").severity == "info" and mapped.exit_code == 0
    old = check(files, target, engine=parse_engine("vllm==0.20.0"), params=both)
    assert old.keys("error") == {"vocab_size", "use_heterogeneous_vocab"}


def test_a_draft_shorter_than_the_served_context_is_an_error() -> None:
    files = read_drafter(str(FIXTURES / "qwen3-4b-draft"))
    long = only(
        check(files, FIXTURES / "qwen3-32b-target", params={"max_model_len": 131072}),
        "max_position_embeddings",
    )
    assert (long.severity, long.expected, long.found) == (
        "error",
        ">= 131072 (max_model_len (served))",
        "40960",
    )
    assert "out of bounds" in long.why
    shorter = check(files, FIXTURES / "qwen3-32b-target", params={"max_model_len": 32768})
    assert shorter.findings == ()


def test_a_target_longer_than_the_draft_is_an_error(tmp_path: Path) -> None:
    draft, target = copy_pair(tmp_path, "llama-3.2-3b-draft", "llama-3.1-8b-target")
    edit_json(draft / "config.json", lambda c: c.update(max_position_embeddings=8192))
    f = only(check(read_drafter(str(draft)), target), "max_position_embeddings")
    assert (f.expected, f.found) == (">= 131072 (target max_position_embeddings)", "8192")


def test_linear_rope_scaling_stretches_the_draft() -> None:
    scaling = {"rope_type": "linear", "factor": 4.0}
    config = {"vocab_size": 151936, "max_position_embeddings": 10240, "rope_scaling": scaling}
    result = check(DrafterFiles("d", config), FIXTURES / "qwen3-32b-target")
    assert "max_position_embeddings" not in result.keys("error")


def test_the_same_size_with_other_ids_is_an_error(tmp_path: Path) -> None:
    draft, target = copy_pair(tmp_path, "qwen3-4b-draft", "qwen3-32b-target")
    (target / "tokenizer.json").write_text(tokenizer_json({"a": 0, "b": 1, "ab": 2}))
    (draft / "tokenizer.json").write_text(tokenizer_json({"a": 0, "b": 2, "ab": 1}))
    f = only(check(read_drafter(str(draft)), target), "tokenizer.json:model.vocab")
    assert (f.severity, f.expected) == ("error", "the target's id -> token map")
    assert f.found.startswith("2 ids differ, e.g. id 1: target 'b', draft 'ab'")
    assert "target's tokenizer" in f.why


def test_other_merges_with_the_same_ids_may_cost_acceptance(tmp_path: Path) -> None:
    draft, target = copy_pair(tmp_path, "qwen3-4b-draft", "qwen3-32b-target")
    vocab = {"a": 0, "b": 1, "ab": 2}
    (target / "tokenizer.json").write_text(tokenizer_json(vocab, ["a b"]))
    (draft / "tokenizer.json").write_text(tokenizer_json(vocab, ["b a"]))
    f = only(check(read_drafter(str(draft)), target), "tokenizer.json:model")
    assert f.severity == "warning" and "splits text differently" in f.why


def test_slow_tokenizer_files_are_compared_by_content(tmp_path: Path) -> None:
    draft, target = copy_pair(tmp_path, "llama-3.2-3b-draft", "llama-3.1-8b-target")
    (target / "vocab.json").write_text('{"a": 0}')
    (draft / "vocab.json").write_text('{"b": 0}')
    f = only(check(read_drafter(str(draft)), target), "vocab.json")
    assert (f.severity, f.found) == ("error", "different bytes")


def test_an_added_token_that_means_another_token_is_an_error(tmp_path: Path) -> None:
    draft, target = copy_pair(tmp_path, "qwen3-4b-draft", "qwen3-32b-target")
    edit_json(
        draft / "tokenizer_config.json",
        lambda c: c["added_tokens_decoder"]["151644"].update(content="<|start|>"),
    )
    f = only(check(read_drafter(str(draft)), target), "tokenizer.added_tokens")
    assert f.severity == "error"
    assert f.found == "1 differ, e.g. 151644: target '<|im_start|>', draft '<|start|>'"


def test_a_missing_added_token_or_special_flag(tmp_path: Path) -> None:
    draft, target = copy_pair(tmp_path, "qwen3-4b-draft", "qwen3-32b-target")
    edit_json(draft / "tokenizer_config.json", lambda c: c["added_tokens_decoder"].pop("151668"))
    missing = only(check(read_drafter(str(draft)), target), "tokenizer.added_tokens")
    assert missing.severity == "warning" and "151668 '</think>'" in missing.found
    draft, target = copy_pair(tmp_path / "flag", "qwen3-4b-draft", "qwen3-32b-target")
    edit_json(
        draft / "tokenizer_config.json",
        lambda c: c["added_tokens_decoder"]["151667"].update(special=True),
    )
    flag = only(check(read_drafter(str(draft)), target), "tokenizer.special_tokens")
    assert flag.severity == "info" and "151667 '<think>'" in flag.found


CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


@pytest.mark.parametrize(
    ("draft_template", "severity"),
    [
        (None, "warning"),  # a base model drafting for a chat model
        ("{% for m in messages %}<|endoftext|>{{ m.content }}{% endfor %}", "warning"),
        (CHATML.replace("\n", " "), "info"),
        (CHATML, None),
    ],
)
def test_chat_templates(tmp_path: Path, draft_template: str | None, severity: str | None) -> None:
    draft, target = copy_pair(tmp_path, "qwen3-4b-draft", "qwen3-32b-target")
    (target / "chat_template.jinja").write_text(CHATML)
    if draft_template is not None:
        edit_json(draft / "tokenizer_config.json", lambda c: c.update(chat_template=draft_template))
    result = check(read_drafter(str(draft)), target)
    found = [f.severity for f in result.findings if f.key == "chat_template"]
    assert found == ([severity] if severity else [])


@pytest.mark.parametrize(
    ("engine", "severity"),
    [
        ("vllm==0.9.2", "info"),
        ("vllm==0.10.0", "error"),
        ("vllm==0.14.1", "error"),
        ("vllm==0.15.0", None),
        ("sglang==0.5.1", "error"),
        ("sglang==0.5.2", None),
    ],
)
def test_engine_releases_with_draft_models(engine: str, severity: str | None) -> None:
    files = read_drafter(str(FIXTURES / "qwen3-4b-draft"))
    result = check(files, FIXTURES / "qwen3-32b-target", engine=parse_engine(engine))
    found = [f.severity for f in result.findings if f.key == "engine"]
    assert found == ([severity] if severity else [])


def test_a_value_against_the_entry_and_no_target() -> None:
    config = json.loads((FIXTURES / "qwen3-4b-draft" / "config.json").read_text())
    config["vocab_size"] = 151669
    result = check(DrafterFiles("qwen3-4b", config), None, ref="Qwen/Qwen3-4B")
    f = only(result, "vocab_size")
    assert (f.severity, f.expected, f.found) == ("error", "151936", "151669")
    assert "github.com/citsjtu2020/LLM-Prof" in f.why
    assert only(result, "target").severity == "info"


def test_nothing_to_check_is_an_error() -> None:
    result = validate_method("draft_model", CheckInputs(None, None, None, VLLM, 3, {}))
    assert result.keys("error") == {"drafter"}


def main() -> None:
    for path, data in generated_files().items():
        path.write_bytes(data)
        print(f"wrote {path} ({len(data)} bytes)")


if __name__ == "__main__":
    main()
