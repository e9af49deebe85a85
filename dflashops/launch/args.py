"""Engine command lines from a playbook: vLLM and SGLang, every speculative method.

The command line is data (a list of strings that the bundled server hands to ``execvpe``; no
shell ever parses it), and the speculative config is JSON dumped from a dict, never pasted
together. The flags and their values per engine version are those each engine's own argument
parser accepts (vLLM ``--speculative-config`` JSON; SGLang ``--speculative-*`` flags).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from dflashops.errors import PlaybookError
from dflashops.playbook.engine_methods import SGLANG_ALGORITHMS, sglang_window
from dflashops.playbook.models import Playbook

VLLM_MODULE = "vllm.entrypoints.cli.main"
SGLANG_MODULE = "sglang.launch_server"
# DFlash runs its draft layers non-causally; these vLLM backends support that (0.20+).
NON_CAUSAL_BACKENDS = frozenset(
    {"FLASH_ATTN", "FLEX_ATTENTION", "ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "ROCM_ATTN"}
)
DFLASH_GPU_BACKEND = "FLASH_ATTN"
VLLM_API_KEY_ENV = "VLLM_API_KEY"  # vLLM reads it when --api-key is absent (envs.VLLM_API_KEY)
# SGLang 0.5.3-0.5.9 take n-gram bounds as --speculative-ngram-{min,max}-match-window-size;
# 0.5.10 replaced the window by a trie (--speculative-ngram-max-trie-depth) and its argument
# parser refuses the old flags, so the server does not start (the drafter check says the same)
SGLANG_DROPS_NGRAM_WINDOW = (0, 5, 10)
# SGLang serves /metrics only when asked (vLLM always does); bench and watch read it
SGLANG_METRICS_FLAG = "--enable-metrics"
# SGLang's CPU engine is chosen by this variable, not by --device alone: without it
# sglang.srt.utils.common.is_cpu() is False and the CPU backends are never picked (0.5.16)
SGLANG_CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
SGLANG_DRAFTER_FLAG = "--speculative-draft-model-path"


@dataclass(frozen=True)
class TargetFacts:
    """What launch knows about the target model from its config.json (when it could read it)."""

    hybrid_linear_attention: bool = False  # Qwen3.5/3.6 Gated DeltaNet, Qwen3-Next


def hybrid_from_config(config: dict[str, Any]) -> bool:
    """A target with linear-attention (GDN/mamba-style) layers needs SGLang's extra state buffer."""
    text = config.get("text_config")
    merged = {**config, **(text if isinstance(text, dict) else {})}
    layer_types = merged.get("layer_types")
    if isinstance(layer_types, list) and any("linear" in str(t) for t in layer_types):
        return True
    model_type = str(merged.get("model_type", ""))
    return model_type.startswith(("qwen3_5", "qwen3_next", "qwen3_6"))


def speculative_config(playbook: Playbook) -> dict[str, Any] | None:
    """vLLM's ``--speculative-config`` for the playbook's method (None for ``none``)."""
    drafter, k = playbook.drafter, playbook.server.num_speculative_tokens
    if drafter.method == "none":
        return None
    config: dict[str, Any] = {"method": drafter.method, "num_speculative_tokens": k}
    if drafter.model is not None:
        config["model"] = str(drafter.model.path)
    schedule = playbook.server.speculative_schedule
    if schedule is not None:  # k per running batch size (vLLM >= 0.24; playbook checks it)
        config["num_speculative_tokens_per_batch_size"] = [list(entry) for entry in schedule]
    if drafter.method == "ngram":
        if drafter.prompt_lookup_min is not None:
            config["prompt_lookup_min"] = drafter.prompt_lookup_min
        if drafter.prompt_lookup_max is not None:
            config["prompt_lookup_max"] = drafter.prompt_lookup_max
    return config


def speculative_json(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def attention_backend(playbook: Playbook) -> str | None:
    """The backend to pass: the playbook's, else FLASH_ATTN for DFlash on a GPU, else none.

    On the CPU there is one backend (which supports non-causal attention), so nothing is passed.
    """
    chosen, method = playbook.server.attention_backend, playbook.drafter.method
    if playbook.engine.name != "vllm":
        return chosen
    if chosen is None:
        return (
            DFLASH_GPU_BACKEND if method == "dflash" and playbook.server.device == "cuda" else None
        )
    if method == "dflash" and chosen.upper() not in NON_CAUSAL_BACKENDS:
        raise PlaybookError(
            f"DFlash needs an attention backend with non-causal attention, not {chosen}",
            source="playbook",
            key="server.attention_backend",
            hint=f"use one of {', '.join(sorted(NON_CAUSAL_BACKENDS))} or leave it unset",
        )
    return chosen


def vllm_argv(playbook: Playbook, python: str) -> list[str]:
    """``<python> -m vllm.entrypoints.cli.main serve …`` (not ``bin/vllm``: its shebang names the
    venv path it was installed at, which a thin venv or a mounted one does not share)."""
    server = playbook.server
    argv = [python, "-m", VLLM_MODULE, "serve", str(playbook.model.path)]
    argv += ["--served-model-name", playbook.served_name]
    argv += ["--host", server.host, "--port", str(server.port)]
    argv += ["--tensor-parallel-size", str(server.tensor_parallel_size)]
    if server.max_model_len is not None:
        argv += ["--max-model-len", str(server.max_model_len)]
    if server.device == "cuda":
        argv += ["--gpu-memory-utilization", _number(server.gpu_memory_utilization)]
    backend = attention_backend(playbook)
    if backend:
        argv += ["--attention-backend", backend]
    if server.enforce_eager:
        argv.append("--enforce-eager")
    config = speculative_config(playbook)
    if config is not None:
        argv += ["--speculative-config", speculative_json(config)]
    return argv + server.args_for("vllm")


def sglang_argv(playbook: Playbook, python: str, target: TargetFacts) -> list[str]:
    """``<python> -m sglang.launch_server …``.

    SGLang counts the verify window (the anchor or root token plus the drafts), so
    ``--speculative-num-draft-tokens`` is ``num_speculative_tokens + 1``: vLLM's k=15 for a
    block-16 DFlash drafter is SGLang's 16.
    """
    server, drafter = playbook.server, playbook.drafter
    if server.api_key_env:
        raise PlaybookError(
            "server.api_key_env is not supported with SGLang: it takes the key only as an "
            "argument, and dflashops never writes a secret into argv or the spec",
            source="playbook",
            key="server.api_key_env",
            hint="front SGLang with an authenticating proxy, or use vLLM",
        )
    argv = [python, "-m", SGLANG_MODULE, "--model-path", str(playbook.model.path)]
    argv += ["--served-model-name", playbook.served_name]
    argv += ["--host", server.host, "--port", str(server.port)]
    argv += ["--tp-size", str(server.tensor_parallel_size)]
    if server.device == "cpu":
        argv += ["--device", "cpu"]
    # on the CPU too: SGLang sizes its KV cache from this share of the host's memory (0.9 of a
    # 24 GiB machine allocated 18 GB for a tiny model, then died), where vLLM's CPU build reads
    # VLLM_CPU_KVCACHE_SPACE and is given no --gpu-memory-utilization
    argv += ["--mem-fraction-static", _number(server.gpu_memory_utilization)]
    if server.max_model_len is not None:
        argv += ["--context-length", str(server.max_model_len)]
    if server.attention_backend:
        argv += ["--attention-backend", server.attention_backend]
    if server.enforce_eager:
        argv.append("--disable-cuda-graph")
    method, k = drafter.method, server.num_speculative_tokens
    if method != "none" and method not in SGLANG_ALGORITHMS:
        raise PlaybookError(
            f"SGLang has no {method} speculative decoding",
            source="playbook",
            key="drafter.method",
            hint=f"serve {method} with vLLM, or use one of {', '.join(sorted(SGLANG_ALGORITHMS))}",
        )
    if method != "none":
        assert k is not None  # the playbook model requires k with a method
        argv += ["--speculative-algorithm", SGLANG_ALGORITHMS[method]]
        if drafter.model is not None:
            argv += [SGLANG_DRAFTER_FLAG, str(drafter.model.path)]
        if method in ("mtp", "eagle3", "eagle"):
            argv += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1"]
        if method == "dspark":
            # DSpark's window must be gamma + 1; without the flag gamma is the checkpoint's
            # block_size and any other k stops the server (0.5.16 speculative_hook.py)
            argv += ["--speculative-dspark-block-size", str(k)]
        argv += ["--speculative-num-draft-tokens", str(sglang_window(k))]
        if method == "ngram":
            argv += _sglang_ngram_window(playbook)
        if target.hybrid_linear_attention:
            # hybrid GDN targets must roll their recurrent state back on rejected drafts
            argv += ["--mamba-scheduler-strategy", "extra_buffer"]
    more = server.args_for("sglang")
    if SGLANG_METRICS_FLAG not in more:
        argv.append(SGLANG_METRICS_FLAG)
    return argv + more


def _sglang_ngram_window(playbook: Playbook) -> list[str]:
    """The n-gram lookup bounds as the pinned SGLang release takes them (none from 0.5.10)."""
    drafter = playbook.drafter
    bounds = (
        (
            "prompt_lookup_min",
            drafter.prompt_lookup_min,
            "--speculative-ngram-min-match-window-size",
        ),
        (
            "prompt_lookup_max",
            drafter.prompt_lookup_max,
            "--speculative-ngram-max-match-window-size",
        ),
    )
    given = [(key, value, flag) for key, value, flag in bounds if value is not None]
    if not given:
        return []
    if playbook.engine.version_tuple >= SGLANG_DROPS_NGRAM_WINDOW:
        key, _, flag = given[0]
        raise PlaybookError(
            f"SGLang {playbook.engine.version} has no {flag}: 0.5.10 replaced the n-gram window "
            "by a trie, and its argument parser refuses the flag (the server would not start)",
            source="playbook",
            key=f"drafter.{key}",
            hint="remove drafter.prompt_lookup_min/max for SGLang >= 0.5.10 (its trie is tuned "
            "with --speculative-ngram-max-trie-depth and friends in server.extra_args), or pin "
            "SGLang 0.5.3-0.5.9",
        )
    argv: list[str] = []
    for _, value, flag in given:
        argv += [flag, str(value)]
    return argv


def engine_base_env(playbook: Playbook) -> dict[str, str]:
    """Variables the engine needs for what the playbook asks (the playbook's own env wins)."""
    if playbook.engine.name == "sglang" and playbook.server.device == "cpu":
        return dict(SGLANG_CPU_ENV)
    return {}


def engine_argv(playbook: Playbook, python: str, target: TargetFacts | None = None) -> list[str]:
    if playbook.engine.name == "sglang":
        return sglang_argv(playbook, python, target or TargetFacts())
    return vllm_argv(playbook, python)


def _number(value: float) -> str:
    return f"{value:g}"
