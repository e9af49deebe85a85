"""SGLang's command line per release: the n-gram window flags exist only up to 0.5.9, /metrics is
always asked for, and every flag rendered for the CPU is one the real 0.5.16 parser knows.

``tests/fixtures/sglang/sglang-0.5.16-launch-server-flags.txt`` is the list of option strings
printed by ``python -m sglang.launch_server --help`` of a real SGLang 0.5.16 (README there).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dflashops.errors import PlaybookError
from dflashops.launch.args import SGLANG_METRICS_FLAG, TargetFacts, engine_argv
from dflashops.playbook.models import Playbook

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sglang"
FLAGS_0516 = FIXTURES / "sglang-0.5.16-launch-server-flags.txt"
WINDOW_FLAGS = (
    "--speculative-ngram-min-match-window-size",
    "--speculative-ngram-max-match-window-size",
)


def book(
    version: str,
    method: str = "ngram",
    *,
    lookup: tuple[int, int] | None = None,
    device: str = "cpu",
    extra: tuple[str, ...] = (),
    drafter_path: str | None = None,
) -> Playbook:
    drafter: dict[str, Any] = {"method": method}
    if lookup is not None:
        drafter.update(prompt_lookup_min=lookup[0], prompt_lookup_max=lookup[1])
    if drafter_path is not None:
        drafter["model"] = {"path": drafter_path}
    server: dict[str, Any] = {"device": device, "port": 30000, "extra_args": list(extra)}
    if method != "none":
        server["num_speculative_tokens"] = 4
    return Playbook.model_validate(
        {
            "name": "t",
            "model": {"path": "/models/tiny-qwen3", "served_name": "tiny"},
            "drafter": drafter,
            "engine": {"name": "sglang", "version": version},
            "server": server,
        }
    )


def argv(playbook: Playbook) -> list[str]:
    return engine_argv(playbook, "/venv/bin/python", TargetFacts())


def value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("version", ["0.5.3", "0.5.9"])
def test_window_flags_up_to_059(version: str) -> None:
    # on a GPU: SGLang's CPU engine runs n-gram from 0.5.16 (test_engine_methods.py)
    args = argv(book(version, lookup=(2, 4), device="cuda"))
    assert value(args, WINDOW_FLAGS[0]) == "2"
    assert value(args, WINDOW_FLAGS[1]) == "4"


@pytest.mark.parametrize("version", ["0.5.10", "0.5.16", "0.5.23"])
def test_no_window_flags_from_0510(version: str) -> None:
    args = argv(book(version, device="cuda"))
    assert not set(WINDOW_FLAGS) & set(args)
    assert value(args, "--speculative-algorithm") == "NGRAM"
    assert value(args, "--speculative-num-draft-tokens") == "5"  # k + 1


@pytest.mark.parametrize("lookup", [(2, 4), (3, 3)])
def test_window_bounds_refused_from_0510(lookup: tuple[int, int]) -> None:
    with pytest.raises(PlaybookError) as caught:
        argv(book("0.5.10", lookup=lookup, device="cuda"))
    assert caught.value.key == "drafter.prompt_lookup_min"
    assert "--speculative-ngram-min-match-window-size" in str(caught.value)


def test_one_bound_alone_is_refused_by_its_own_key() -> None:
    playbook = book("0.5.16")
    playbook = playbook.model_copy(
        update={"drafter": playbook.drafter.model_copy(update={"prompt_lookup_max": 4})}
    )
    with pytest.raises(PlaybookError) as caught:
        argv(playbook)
    assert caught.value.key == "drafter.prompt_lookup_max"


def test_metrics_asked_for_once() -> None:
    assert argv(book("0.5.16")).count(SGLANG_METRICS_FLAG) == 1
    assert argv(book("0.5.16", "none")).count(SGLANG_METRICS_FLAG) == 1
    given = argv(book("0.5.16", extra=(SGLANG_METRICS_FLAG,)))
    assert given.count(SGLANG_METRICS_FLAG) == 1


def known_flags() -> set[str]:
    return set(FLAGS_0516.read_text(encoding="utf-8").split())


@pytest.mark.parametrize(
    ("method", "drafter_path"),
    [("none", None), ("ngram", None), ("eagle3", "/models/eagle3"), ("eagle", "/models/eagle")],
)
def test_cpu_argv_flags_are_all_known_to_the_real_0516_parser(
    method: str, drafter_path: str | None
) -> None:
    args = argv(book("0.5.16", method, drafter_path=drafter_path))
    rendered = {a for a in args if a.startswith("--")}
    assert rendered <= known_flags(), rendered - known_flags()
    assert "--device" in rendered and value(args, "--device") == "cpu"


def test_dspark_renders_its_block_size_so_any_k_starts() -> None:
    # SGLang 0.5.16 takes DSpark's gamma from the checkpoint's block_size unless the flag says
    # otherwise, and refuses a --speculative-num-draft-tokens other than gamma + 1
    args = argv(book("0.5.16", "dspark", device="cuda", drafter_path="/models/dspark"))
    assert value(args, "--speculative-algorithm") == "DSPARK"
    assert value(args, "--speculative-draft-model-path") == "/models/dspark"
    assert value(args, "--speculative-dspark-block-size") == "4"
    assert value(args, "--speculative-num-draft-tokens") == "5"
    rendered = {a for a in args if a.startswith("--")}
    assert rendered <= known_flags(), rendered - known_flags()


def test_the_real_0516_parser_has_no_window_flags() -> None:
    flags = known_flags()
    assert "--speculative-ngram-max-trie-depth" in flags
    assert not set(WINDOW_FLAGS) & flags


def test_cpu_engine_variable_in_the_server_spec() -> None:
    from dflashops.launch.render import RenderInputs, build_spec

    inputs = RenderInputs(supervisor="fallback", venv_python="/venv/bin/python")
    assert build_spec(book("0.5.16"), inputs).env["SGLANG_USE_CPU_ENGINE"] == "1"
    on_gpu = build_spec(book("0.5.16", device="cuda"), inputs)
    assert "SGLANG_USE_CPU_ENGINE" not in on_gpu.env
    playbook = book("0.5.16")
    own = playbook.model_copy(
        update={
            "server": playbook.server.model_copy(update={"env": {"SGLANG_USE_CPU_ENGINE": "0"}})
        }
    )
    assert build_spec(own, inputs).env["SGLANG_USE_CPU_ENGINE"] == "0"  # the playbook's wins


def test_the_cpu_kv_cache_is_sized_by_the_memory_share_as_on_a_gpu() -> None:
    # SGLang's CPU engine sized its KV cache from mem_fraction_static 0.843 of the host: 18 GB
    # for the tiny model on a 24 GiB machine, and the server died; the share is always rendered
    for device in ("cpu", "cuda"):
        at = book("0.5.16", "none", device=device)
        at = at.model_copy(
            update={"server": at.server.model_copy(update={"gpu_memory_utilization": 0.05})}
        )
        argv = engine_argv(at, "python")
        assert argv[argv.index("--mem-fraction-static") + 1] == "0.05"


def test_each_engine_gets_its_own_engine_args_after_the_shared_ones() -> None:
    data = {
        "name": "t",
        "model": {"path": "/models/tiny-qwen3", "served_name": "tiny"},
        "engine": {"name": "sglang", "version": "0.5.16"},
        "server": {
            "device": "cpu",
            "extra_args": ["--max-running-requests", "8"],
            "engine_args": {"vllm": ["--dtype", "float32"], "sglang": ["--dtype", "bfloat16"]},
        },
    }
    sglang = engine_argv(Playbook.model_validate(data), "python")
    data["engine"] = {"name": "vllm", "version": "0.32.0"}
    vllm = engine_argv(Playbook.model_validate(data), "python")

    assert sglang[-4:] == ["--max-running-requests", "8", "--dtype", "bfloat16"]
    assert vllm[-4:] == ["--max-running-requests", "8", "--dtype", "float32"]
    assert "float32" not in sglang and "bfloat16" not in vllm


def test_a_secret_in_engine_args_is_refused_as_in_extra_args() -> None:
    with pytest.raises(ValueError, match="--api-key"):
        Playbook.model_validate(
            {
                "name": "t",
                "model": {"path": "/m"},
                "engine": {"version": "0.32.0"},
                "server": {"engine_args": {"vllm": ["--api-key", "hunter2"]}},
            }
        )
