"""n-gram (prompt lookup) and suffix decoding: their parameters and the engines that have them.

Neither method has a drafter checkpoint: what can break is a parameter the engine refuses or
never reads, and an engine release without the method. Every rule names the engine source that
makes it matter (the vLLM and SGLang releases read are listed with each fact). The parameters are
the keys of vLLM's ``--speculative-config`` (``vllm/config/speculative.py``); dflashops' launch
maps the n-gram ones onto SGLang's ``--speculative-ngram-*-match-window-size``. Standard library
only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dflashops.drafter.checks_lookup_versions import Window, dotted
from dflashops.drafter.engine import EngineSpec, Version
from dflashops.drafter.keys import MISSING, is_int, show
from dflashops.drafter.result import Finding, Severity

NGRAM_KEYS = ("prompt_lookup_min", "prompt_lookup_max")
# vllm/config/speculative.py: the defaults when neither bound is given ("arbitrarily chosen")
NGRAM_DEFAULT = 5
# every vLLM release read (0.8.5 to 0.34.0) has ngram; SGLang's NGRAM appears in 0.5.3
# (python/sglang/srt/speculative/spec_info.py: absent in 0.5.2)
NGRAM_VLLM = Window((0, 8, 5))
NGRAM_SGLANG = Window((0, 5, 3), (0, 5, 2))
# SGLang 0.5.3-0.5.9 take the bounds as --speculative-ngram-{min,max}-match-window-size (what
# dflashops' launch renders); 0.5.10 replaced the window by a trie (--speculative-ngram-max-trie-
# depth) and its argument parser no longer knows those flags
SGLANG_DROPS_WINDOW: Version = (0, 5, 10)
# "suffix" joins vLLM's SpeculativeMethod in 0.11.1 (absent from 0.11.0's config/speculative.py)
SUFFIX_VLLM = Window((0, 11, 1), (0, 11, 0))
# 0.11.1-0.33.0 import Snowflake's arctic_inference (SuffixDecodingProposer); 0.34.0 drafts with
# its own GPU speculator (v1/worker/gpu/spec_decode/suffix) and drops the dependency
VLLM_NATIVE_SUFFIX: Version = (0, 34, 0)
ARCTIC_PIN = "arctic-inference==0.1.1"  # the install line vLLM's ImportError prints
# vllm/config/utils.py: from 0.16.0 every config class forbids unknown fields; up to 0.15.0 the
# pydantic dataclass ignored them
VLLM_FORBIDS_UNKNOWN: Version = (0, 16, 0)

# (key, vLLM's default, minimum, maximum, integer) as _validate_suffix_decoding checks them
SUFFIX_PARAMS: tuple[tuple[str, float, float, float | None, bool], ...] = (
    ("suffix_decoding_max_tree_depth", 24, 1, None, True),
    ("suffix_decoding_max_cached_requests", 10000, 0, None, True),
    ("suffix_decoding_max_spec_factor", 1.0, 0, None, False),
    ("suffix_decoding_min_token_prob", 0.1, 0, 1, False),
)
# 0.34.0 adds the GPU corpus size ([0, 2**31)) and keeps these two only as no-ops
CORPUS_KEY = "suffix_decoding_corpus_tokens"
CORPUS_LIMIT = 1 << 31
NOOP_IN_NATIVE = ("suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob")
SUFFIX_KEYS = (*(p[0] for p in SUFFIX_PARAMS), CORPUS_KEY)


def _finding(severity: Severity, key: str, expected: str, found: str, why: str) -> Finding:
    return Finding(severity, key, expected, found, why, "lookup")


def engine_window(
    engine: EngineSpec, method: str, vllm: Window, sglang: Window | None
) -> list[Finding]:
    """The method against the engine release: absent is an error (the server refuses the
    speculative config), a release nobody read is a note."""
    window = vllm if engine.name == "vllm" else sglang
    if window is None:
        return [
            _finding(
                "error",
                "engine",
                f"vllm{vllm.wanted}",
                str(engine),
                f"SGLang has no {method} speculative algorithm (its --speculative-algorithm "
                "choices through 0.5.23: EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, "
                "UNO): serve it with vLLM.",
            )
        ]
    support = window.support(engine.version)
    if support == "yes":
        return []
    if support == "no":
        return [
            _finding(
                "error",
                "engine",
                f"{engine.name}{window.wanted}",
                str(engine),
                f"{engine} has no {method} speculative method: the server refuses the "
                "speculative config and nothing is drafted.",
            )
        ]
    return [
        _finding(
            "info", "engine", f"{engine.name}{window.wanted}", str(engine), window.unread(engine)
        )
    ]


def ngram_findings(
    params: Mapping[str, Any], engine: EngineSpec | None, has_drafter: bool
) -> list[Finding]:
    out: list[Finding] = []
    if engine is not None:
        out += engine_window(engine, "ngram", NGRAM_VLLM, NGRAM_SGLANG)
    if has_drafter:
        out.append(_no_checkpoint("ngram"))
    out += _foreign_keys(params, NGRAM_KEYS, "ngram")
    sglang = engine is not None and engine.name == "sglang"
    if sglang and engine is not None and engine.version >= SGLANG_DROPS_WINDOW:
        return out + [
            _dropped_window(key, params[key], engine) for key in NGRAM_KEYS if key in params
        ]
    low, high = (params.get(k, MISSING) for k in NGRAM_KEYS)
    bad = [key for key, v in zip(NGRAM_KEYS, (low, high), strict=True) if not _whole(v)]
    for key in bad:
        out.append(
            _finding(
                "error",
                key,
                "an integer >= 1",
                show(params[key]),
                "vLLM refuses a lookup window below 1 (config/speculative.py: a ValueError in "
                "0.10-0.15, Field(ge=1) from 0.16); SGLang's "
                "--speculative-ngram-*-match-window-size take integers.",
            )
        )
    if bad:
        return out
    if low is MISSING and high is MISSING:
        out.append(
            _finding(
                "info",
                "prompt_lookup_min",
                "prompt_lookup_min and prompt_lookup_max",
                "(missing)",
                f"vLLM drafts with n-grams of exactly {NGRAM_DEFAULT} tokens when neither bound "
                "is set (config/speculative.py); SGLang uses its own defaults (1..12 in 0.5.3).",
            )
        )
    elif low is MISSING or high is MISSING:
        given, other = ("prompt_lookup_max", "prompt_lookup_min")[:: 1 if low is MISSING else -1]
        out.append(
            _finding(
                "info",
                other,
                f"a bound of its own (defaults to {given})",
                "(missing)",
                f"vLLM copies {given} into {other} (config/speculative.py): one n-gram length "
                "only, so shorter repeats in the prompt are never matched.",
            )
        )
    elif low > high:
        out.append(
            _finding(
                "warning" if sglang else "error",
                "prompt_lookup_min",
                f"<= prompt_lookup_max ({high})",
                str(low),
                "SGLang's server_args.py does not compare the two window bounds (0.5.3-0.5.9): "
                "its matcher gets an empty window range and matches nothing."
                if sglang
                else f"vLLM raises 'prompt_lookup_min={low} must be <= prompt_lookup_max={high}' "
                "(config/speculative.py, every release read): the server does not start.",
            )
        )
    return out


def _dropped_window(key: str, value: Any, engine: EngineSpec) -> Finding:
    flag = "--speculative-ngram-" + key.removeprefix("prompt_lookup_") + "-match-window-size"
    return _finding(
        "error",
        key,
        "(unset) on sglang>=0.5.10",
        show(value),
        f"{engine} has no {flag} (0.5.10 replaced the match window by a trie, "
        "--speculative-ngram-max-trie-depth, in server_args.py): the argument parser refuses "
        "the flag and the server does not start. Leave the bound unset for SGLang.",
    )


def suffix_findings(
    params: Mapping[str, Any], engine: EngineSpec | None, k: int | None, has_drafter: bool
) -> list[Finding]:
    out: list[Finding] = []
    if engine is not None:
        out += engine_window(engine, "suffix", SUFFIX_VLLM, None)
        out += _suffix_engine_notes(params, engine)
    if has_drafter:
        out.append(_no_checkpoint("suffix"))
    out += _foreign_keys(params, SUFFIX_KEYS, "suffix")
    depth: float | None = None
    for key, default, low, high, integer in SUFFIX_PARAMS:
        value = params.get(key, default)
        if _in_range(value, low, high, integer):
            if key == SUFFIX_PARAMS[0][0]:
                depth = value
            continue
        span = f">= {low:g}" if high is None else f"in [{low:g}, {high:g}]"
        kind = "an integer" if integer else "a number"
        out.append(
            _finding(
                "error",
                key,
                f"{kind} {span}",
                show(value),
                f"vLLM raises a ValueError unless {key} is {span} (_validate_suffix_decoding "
                "in config/speculative.py, 0.11.1-0.33; v1/worker/gpu/spec_decode/suffix/"
                "config.py in 0.34): the server does not start.",
            )
        )
    corpus = params.get(CORPUS_KEY, MISSING)
    if corpus is not MISSING and not _in_range(corpus, 0, CORPUS_LIMIT - 1, True):
        out.append(
            _finding(
                "error",
                CORPUS_KEY,
                "an integer in [0, 2**31)",
                show(corpus),
                "vLLM 0.34 raises a ValueError for a GPU corpus size outside [0, 2**31) "
                "(v1/worker/gpu/spec_decode/suffix/config.py): the server does not start.",
            )
        )
    if k is not None and depth is not None and k > depth:
        out.append(
            _finding(
                "info",
                "num_speculative_tokens",
                f"<= suffix_decoding_max_tree_depth ({depth:g})",
                str(k),
                "Suffix decoding drafts at most the matched continuation, which the tree depth "
                "bounds (vLLM's suffix proposer caps each draft at num_speculative_tokens and "
                "matches at most max_tree_depth tokens): the positions past it are never filled.",
            )
        )
    return out


def _suffix_engine_notes(params: Mapping[str, Any], engine: EngineSpec) -> list[Finding]:
    """What the release does with the suffix parameters: the arctic-inference dependency up to
    0.33, the GPU speculator's own parameters from 0.34."""
    if engine.name != "vllm" or SUFFIX_VLLM.support(engine.version) != "yes":
        return []
    v, found = engine.version, str(engine)
    if v >= VLLM_NATIVE_SUFFIX:
        out = [
            _finding(
                "info",
                key,
                "(unset)",
                show(params[key]),
                "vLLM 0.34's GPU suffix speculator ignores it (deprecated, 'has no effect': "
                "config/speculative.py); it always drafts num_speculative_tokens tokens.",
            )
            for key in NOOP_IN_NATIVE
            if key in params
        ]
        depth = params.get(SUFFIX_PARAMS[0][0], SUFFIX_PARAMS[0][1])
        cached = params.get("suffix_decoding_max_cached_requests", 1)
        corpus = params.get(CORPUS_KEY, 1)
        if is_int(depth) and depth < 2 and cached != 0 and corpus != 0:
            out.append(
                _finding(
                    "warning",
                    "suffix_decoding_max_tree_depth",
                    ">= 2",
                    str(depth),
                    "vLLM 0.34 keys its cross-request corpus on the last 2 tokens and turns the "
                    "corpus off below depth 2 (suffix/speculator.py warns 'too short for "
                    "cross-request matching'): only each request's own history is drafted from.",
                )
            )
        return out
    out = [
        _finding(
            "info",
            "engine.arctic_inference",
            f"{ARCTIC_PIN} in the engine venv",
            found,
            f"vLLM {dotted(SUFFIX_VLLM.first_with)}-0.33 draft suffixes with Snowflake's "
            "arctic_inference and raise ImportError 'Arctic Inference is required for suffix "
            f"decoding' at start without it (config/speculative.py): install {ARCTIC_PIN}.",
        )
    ]
    if CORPUS_KEY in params:
        refused = v >= VLLM_FORBIDS_UNKNOWN
        out.append(
            _finding(
                "error" if refused else "info",
                CORPUS_KEY,
                "vllm>=0.34.0",
                found,
                f"{found} has no such speculative-config field: "
                + (
                    "its config forbids unknown fields, so the server does not start."
                    if refused
                    else "this release ignores unknown fields, so the setting does nothing."
                ),
            )
        )
    return out


def _foreign_keys(params: Mapping[str, Any], own: tuple[str, ...], method: str) -> list[Finding]:
    """Parameters of another method: the engine reads them only for their own method."""
    lookup = (*NGRAM_KEYS, *SUFFIX_KEYS)
    return [
        _finding(
            "info",
            key,
            "(unset)",
            show(params[key]),
            f"Only the {'suffix' if key in SUFFIX_KEYS else 'ngram'} method reads it; "
            f"with {method} vLLM ignores it.",
        )
        for key in params
        if key in lookup and key not in own
    ]


def _no_checkpoint(method: str) -> Finding:
    return _finding(
        "info",
        "drafter",
        "(none)",
        "a drafter checkpoint",
        f"{method} drafts from the request's own tokens (and, for suffix, earlier responses): "
        "no checkpoint is loaded, so the drafter's files were not read.",
    )


def _whole(value: Any) -> bool:
    return value is MISSING or (is_int(value) and value >= 1)


def _in_range(value: Any, low: float, high: float | None, integer: bool) -> bool:
    number = is_int(value) or (not integer and isinstance(value, float))
    return number and value >= low and (high is None or value <= high)
