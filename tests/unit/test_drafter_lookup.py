"""n-gram and suffix decoding (``dflashops.drafter.family_lookup``): the parameters the engines
refuse or ignore, and the releases that have each method."""

from __future__ import annotations

from typing import Any

import pytest

from dflashops.drafter.engine import EngineSpec, parse_engine
from dflashops.drafter.families import CheckInputs, Family
from dflashops.drafter.files import DrafterFiles
from dflashops.drafter.methods import validate_method
from dflashops.drafter.result import CheckResult, Finding

VLLM = parse_engine("vllm==0.32.0")


def check(
    method: Family,
    params: dict[str, Any] | None = None,
    *,
    engine: EngineSpec | None = VLLM,
    k: int | None = 4,
    drafter: DrafterFiles | None = None,
) -> CheckResult:
    return validate_method(method, CheckInputs(drafter, None, None, engine, k, params or {}))


def only(result: CheckResult, key: str) -> Finding:
    hits = [f for f in result.findings if f.key == key]
    assert len(hits) == 1, result.findings
    return hits[0]


def test_ngram_with_both_bounds_is_clean() -> None:
    assert check("ngram", {"prompt_lookup_min": 2, "prompt_lookup_max": 5}).findings == ()


def test_ngram_bounds_the_engine_fills_in_are_notes() -> None:
    none = only(check("ngram"), "prompt_lookup_min")
    assert none.severity == "info" and "exactly 5 tokens" in none.why
    one = only(check("ngram", {"prompt_lookup_max": 4}), "prompt_lookup_min")
    assert (one.severity, one.found) == ("info", "(missing)") and "copies" in one.why


def test_ngram_min_above_max_is_refused() -> None:
    f = only(check("ngram", {"prompt_lookup_min": 6, "prompt_lookup_max": 3}), "prompt_lookup_min")
    assert (f.severity, f.expected, f.found) == ("error", "<= prompt_lookup_max (3)", "6")
    assert "must be <= prompt_lookup_max=3" in f.why


@pytest.mark.parametrize("value", [0, -1, 2.5, "3", True])
def test_ngram_bounds_must_be_positive_integers(value: Any) -> None:
    f = only(
        check("ngram", {"prompt_lookup_min": value, "prompt_lookup_max": 4}), "prompt_lookup_min"
    )
    assert (f.severity, f.expected) == ("error", "an integer >= 1")


@pytest.mark.parametrize(
    ("engine", "severity"),
    [
        ("sglang==0.5.2", "error"),
        ("sglang==0.5.3", None),
        ("vllm==0.8.5", None),
        ("vllm==0.7.3", "info"),
    ],
)
def test_ngram_engines(engine: str, severity: str | None) -> None:
    params = {"prompt_lookup_min": 1, "prompt_lookup_max": 3}
    result = check("ngram", params, engine=parse_engine(engine))
    assert [f.severity for f in result.findings if f.key == "engine"] == (
        [severity] if severity else []
    )


def test_ngram_ignores_suffix_keys_and_files() -> None:
    params = {"prompt_lookup_min": 1, "prompt_lookup_max": 3, "suffix_decoding_max_tree_depth": 8}
    result = check("ngram", params, drafter=DrafterFiles("d", {}))
    assert result.keys("info") == {"suffix_decoding_max_tree_depth", "drafter"}
    assert result.exit_code == 0


def test_suffix_on_vllm_needs_arctic_inference_until_034() -> None:
    note = only(check("suffix"), "engine.arctic_inference")
    assert note.severity == "info" and "arctic-inference==0.1.1" in note.expected
    assert check("suffix", engine=parse_engine("vllm==0.34.0")).findings == ()


@pytest.mark.parametrize(
    ("engine", "severity"),
    [("vllm==0.11.0", "error"), ("vllm==0.11.1", None), ("sglang==0.5.23", "error")],
)
def test_suffix_engines(engine: str, severity: str | None) -> None:
    result = check("suffix", engine=parse_engine(engine))
    assert [f.severity for f in result.findings if f.key == "engine"] == (
        [severity] if severity else []
    )


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("suffix_decoding_max_tree_depth", 0, "an integer >= 1"),
        ("suffix_decoding_max_tree_depth", 2.5, "an integer >= 1"),
        ("suffix_decoding_max_cached_requests", -1, "an integer >= 0"),
        ("suffix_decoding_max_spec_factor", -0.5, "a number >= 0"),
        ("suffix_decoding_min_token_prob", 1.5, "a number in [0, 1]"),
    ],
)
def test_suffix_parameters_out_of_range_are_refused(key: str, value: Any, expected: str) -> None:
    f = only(check("suffix", {key: value}, engine=parse_engine("vllm==0.34.0")), key)
    assert (f.severity, f.expected) == ("error", expected) and "does not start" in f.why


def test_suffix_corpus_size_exists_from_034_only() -> None:
    key = "suffix_decoding_corpus_tokens"
    refused = only(check("suffix", {key: 1024}), key)  # 0.32 forbids unknown fields
    assert (refused.severity, refused.expected) == ("error", "vllm>=0.34.0")
    ignored = only(check("suffix", {key: 1024}, engine=parse_engine("vllm==0.14.0")), key)
    assert ignored.severity == "info"
    too_big = only(check("suffix", {key: 1 << 31}, engine=parse_engine("vllm==0.34.0")), key)
    assert too_big.severity == "error"


def test_suffix_034_ignores_spec_factor_and_needs_depth_two_for_the_corpus() -> None:
    v034 = parse_engine("vllm==0.34.0")
    factor = only(
        check("suffix", {"suffix_decoding_max_spec_factor": 2.0}, engine=v034),
        "suffix_decoding_max_spec_factor",
    )
    assert factor.severity == "info" and "no effect" in factor.why
    shallow = only(
        check("suffix", {"suffix_decoding_max_tree_depth": 1}, engine=v034, k=1),
        "suffix_decoding_max_tree_depth",
    )
    assert shallow.severity == "warning"
    alone = check(
        "suffix",
        {"suffix_decoding_max_tree_depth": 1, "suffix_decoding_max_cached_requests": 0},
        engine=v034,
        k=1,
    )
    assert alone.findings == ()


def test_suffix_k_past_the_tree_depth_is_a_note() -> None:
    f = only(
        check(
            "suffix",
            {"suffix_decoding_max_tree_depth": 8},
            k=12,
            engine=parse_engine("vllm==0.34.0"),
        ),
        "num_speculative_tokens",
    )
    assert (f.severity, f.expected, f.found) == (
        "info",
        "<= suffix_decoding_max_tree_depth (8)",
        "12",
    )


def test_suffix_ignores_ngram_keys() -> None:
    result = check("suffix", {"prompt_lookup_min": 2}, engine=parse_engine("vllm==0.34.0"))
    assert only(result, "prompt_lookup_min").severity == "info"


def test_without_an_engine_only_the_parameters_are_checked() -> None:
    assert check("suffix", engine=None).findings == ()
    assert check("ngram", {"prompt_lookup_min": 3, "prompt_lookup_max": 2}, engine=None).keys(
        "error"
    ) == {"prompt_lookup_min"}


def test_sglang_window_bounds_exist_until_059() -> None:
    params = {"prompt_lookup_min": 1, "prompt_lookup_max": 3}
    assert check("ngram", params, engine=parse_engine("sglang==0.5.9")).findings == ()
    dropped = check("ngram", params, engine=parse_engine("sglang==0.5.10"))
    assert dropped.keys("error") == {"prompt_lookup_min", "prompt_lookup_max"}
    f = only(dropped, "prompt_lookup_max")
    assert "--speculative-ngram-max-match-window-size" in f.why and "does not start" in f.why
    assert check("ngram", engine=parse_engine("sglang==0.5.23")).keys("error") == set()
    inverted = {"prompt_lookup_min": 4, "prompt_lookup_max": 2}
    empty = only(
        check("ngram", inverted, engine=parse_engine("sglang==0.5.9")), "prompt_lookup_min"
    )
    assert empty.severity == "warning"
