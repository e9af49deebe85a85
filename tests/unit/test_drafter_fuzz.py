"""Hostile inputs: every drafter check ends in findings or one-line DrafterErrors, never a
traceback."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dflashops.cli import cli
from dflashops.drafter import (
    DrafterFiles,
    TargetFiles,
    corrected_config,
    diff_against_entry,
    diff_configs,
    load_registry,
    parse_engine,
    read_drafter,
    validate_drafter,
)
from dflashops.drafter.keys import SHOW_LIMIT
from dflashops.drafter.safetensors import read_header, read_weights
from dflashops.errors import DrafterError
from tests.fixtures.drafter import CORRECTED, REF_36, TARGET, config

REGISTRY = load_registry()
ENTRY = REGISTRY.resolve(REF_36)
WEIGHTS = read_weights(CORRECTED)
TARGET_FILES = TargetFiles("t", config(TARGET))
KNOWN_KEYS = [
    "architectures",
    "hidden_size",
    "num_hidden_layers",
    "vocab_size",
    "layer_types",
    "sliding_window",
    "use_sliding_window",
    "num_target_layers",
    "target_hidden_size",
    "block_size",
    "dflash_config",
    "mask_token_id",
    "target_layer_ids",
    "swa_window_size",
    "pard_token",
    "model_type",
    "num_attention_heads",
    "head_dim",
    "intermediate_size",
    "sample_from_anchor",
    "use_aux_hidden_state",
]
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["full_attention", "sliding_attention", "DFlashDraftModel", "qwen3"]),
)
keys = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(max_size=10))
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=8), st.dictionaries(keys, children, max_size=8)
    ),
    max_leaves=40,
)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """The real config with keys dropped, replaced by junk, or nested junk added."""
    base: dict[str, Any] = config(CORRECTED)
    for key in draw(st.lists(st.sampled_from(sorted(base)), max_size=6)):
        base.pop(key, None)
    base |= draw(st.dictionaries(st.sampled_from(KNOWN_KEYS), json_values, max_size=6))
    if draw(st.booleans()) and isinstance(base.get("dflash_config"), dict):
        base["dflash_config"] = base["dflash_config"] | draw(
            st.dictionaries(st.sampled_from(KNOWN_KEYS), json_values, max_size=4)
        )
    return base


def assert_sane(result: Any) -> None:
    for f in result.findings:
        assert f.severity in {"error", "warning", "info"}
        assert f.key and f.why
        assert len(f.expected) <= 400 and len(f.found) <= 400
    assert result.exit_code in {0, 3, 4}


@FAST
@given(
    cfg=configs(),
    with_target=st.booleans(),
    with_ref=st.booleans(),
    engine=st.sampled_from(
        [None, "vllm==0.19.0", "vllm==0.25.0", "vllm==0.26.0", "sglang==0.5.11"]
    ),
    k=st.one_of(st.none(), st.integers(min_value=1, max_value=10**6)),
)
def test_validate_never_raises(
    cfg: dict[str, Any], with_target: bool, with_ref: bool, engine: str | None, k: int | None
) -> None:
    drafter = DrafterFiles("fuzz", cfg, weights=WEIGHTS)
    result = validate_drafter(
        drafter,
        TARGET_FILES if with_target else None,
        ENTRY if with_ref else None,
        parse_engine(engine) if engine else None,
        k,
    )
    assert_sane(result)
    diff_configs(cfg, config(CORRECTED))
    diff_against_entry(cfg, ENTRY)
    try:
        fixed, _ = corrected_config(cfg, ENTRY)
    except DrafterError as exc:
        assert "\n" not in exc.one_line()
    else:
        assert validate_drafter(DrafterFiles("f", fixed), ref=ENTRY).summary.errors >= 0


@FAST
@given(junk=json_values, target_junk=json_values)
def test_any_json_value_anywhere(junk: Any, target_junk: Any) -> None:
    """A config that is all junk, and a target config that is junk too."""
    cfg = junk if isinstance(junk, dict) else {"dflash_config": junk, "layer_types": junk}
    target = TargetFiles("t", {"text_config": target_junk, "num_hidden_layers": target_junk})
    assert_sane(validate_drafter(DrafterFiles("j", cfg), target, ENTRY, None, None))


def test_huge_lists_and_numbers() -> None:
    cfg = config(CORRECTED) | {
        "layer_types": ["sliding_attention"] * 200_000,
        "num_hidden_layers": 10**18,
        "vocab_size": 10**40,
    }
    cfg["dflash_config"]["target_layer_ids"] = list(range(0, 10**6, 3))
    result = validate_drafter(DrafterFiles("huge", cfg, weights=WEIGHTS), TARGET_FILES, ENTRY)
    assert_sane(result)
    assert result.summary.errors >= 3


def test_huge_layer_counts_are_not_expanded_layer_by_layer() -> None:
    """Found by the fuzzer: 2,092,162,496 layers once made a list per layer (gigabytes)."""
    cfg = {"num_hidden_layers": 2_092_162_496}
    target = TargetFiles("t", {"num_hidden_layers": 2_092_162_496})
    assert_sane(validate_drafter(DrafterFiles("j", cfg), target, ENTRY, None, None))
    result = validate_drafter(DrafterFiles("k", config(CORRECTED) | cfg), TARGET_FILES, ENTRY)
    assert_sane(result)
    assert result.summary.errors >= 1


def one_line_or_result(directory: Path) -> str:
    """ "error" (a one-line DrafterError) or "result" (sane findings); anything else fails."""
    try:
        files = read_drafter(str(directory))
    except DrafterError as exc:
        assert "\n" not in exc.one_line()
        return "error"
    assert_sane(validate_drafter(files, None, ENTRY, None, 15))
    return "result"


@settings(max_examples=100, deadline=None)
@given(raw=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_arbitrary_config_bytes(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_bytes(raw)
        assert one_line_or_result(Path(tmp)) in {"error", "result"}


def test_deeply_nested_config_is_a_one_line_error_or_findings(tmp_path: Path) -> None:
    for depth in (50, 5_000, 100_000):
        (tmp_path / "config.json").write_text("[" * depth + "]" * depth)
        assert one_line_or_result(tmp_path) == "error"  # a list is not a config
        nested = '{"dflash_config": ' + '{"a": ' * depth + "1" + "}" * depth + "}"
        (tmp_path / "config.json").write_text(nested)
        assert one_line_or_result(tmp_path) in {"error", "result"}


@settings(max_examples=150, deadline=None)
@given(
    length=st.integers(min_value=0, max_value=2**64 - 1) | st.integers(min_value=0, max_value=400),
    body=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
)
def test_arbitrary_safetensors_headers(length: int, body: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.safetensors"
        path.write_bytes(struct.pack("<Q", length) + body)
        try:
            read_header(path)
        except DrafterError as exc:
            assert "\n" not in exc.one_line()


@settings(max_examples=100, deadline=None)
@given(
    tokenizer=json_values,
    index=json_values,
)
def test_arbitrary_tokenizer_and_index_files(tokenizer: Any, index: Any) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "config.json").write_text(json.dumps(config(CORRECTED)))
        (root / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": tokenizer}))
        (root / "tokenizer.json").write_text(
            json.dumps({"added_tokens": tokenizer, "model": index})
        )
        (root / "model.safetensors.index.json").write_text(json.dumps({"weight_map": index}))
        assert one_line_or_result(root) in {"error", "result"}


@settings(max_examples=40, deadline=None)
@given(cfg=configs())
def test_cli_never_shows_a_traceback(cfg: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(cfg))
        result = CliRunner().invoke(
            cli, ["drafter", "check", tmp, "--target", str(TARGET), "--ref", REF_36, "--json"]
        )
        assert result.exit_code in {0, 3, 4}, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
        assert "Traceback" not in result.output
        json.loads(result.stdout)


def test_show_is_bounded() -> None:
    from dflashops.drafter.keys import show

    assert len(show(list(range(10**5)))) <= SHOW_LIMIT
    assert show(10**5000) == "<16610-bit integer>"
    assert len(show("x" * 10**6)) <= SHOW_LIMIT
