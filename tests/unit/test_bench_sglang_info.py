"""``bench --url`` against SGLang: its release and the speculation in effect, from ``/server_info``
(SGLang has no ``/version``), read from the real 0.5.16 server's replies kept as fixtures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import ResolvedConfig
from dflashops.bench.runner import run_benchmark_sync
from dflashops.bench.settings import BenchSettings
from dflashops.bench.sglang_info import ServedSpeculation, parse_server_info
from dflashops.bench.workload import load_workload
from dflashops.launch.status import _speculative_config
from dflashops.playbook.engine_methods import SGLANG_ALGORITHMS, sglang_method
from tests.unit.test_bench_client import FakeOpenAIServer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures/sglang"


def real_info(method: str) -> dict[str, Any]:
    """The keys of interest of a real 0.5.16 CPU server's ``/get_server_info`` reply."""
    data = json.loads((FIXTURES / f"real-0.5.16-cpu-{method}-generate.json").read_text())
    return dict(data["server_info"])


@pytest.mark.parametrize(
    ("method", "served"),
    [("none", ("none", None)), ("ngram", ("ngram", 4)), ("eagle3", ("eagle3", 4))],
)
def test_the_real_servers_reply_gives_release_method_and_k(
    method: str, served: tuple[str, int | None]
) -> None:
    info = parse_server_info(real_info(method))
    assert info is not None and info.version == "0.5.16"
    assert info.speculation == ServedSpeculation(*served)


def test_a_reply_that_is_not_sglangs_is_not_read() -> None:
    assert parse_server_info({"version": "0.32.0"}) is None  # vLLM's /version
    assert parse_server_info(["x"]) is None
    assert parse_server_info({"speculative_algorithm": None}) is None  # no version


def test_every_algorithm_launch_renders_reads_back_as_its_method() -> None:
    for method, algorithm in SGLANG_ALGORITHMS.items():
        assert sglang_method(algorithm) == method
    assert sglang_method("STANDALONE") == "draft_model"
    assert sglang_method(None) == "none"
    assert sglang_method("LOOKAHEAD") == "lookahead"  # unknown: SGLang's own name
    # status reads a running SGLang's command line the same way (NEXTN was "nextn" before)
    argv = ["--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4"]
    assert _speculative_config(argv) == {"method": "mtp", "num_speculative_tokens": 3}


def smoke() -> BenchSettings:
    return BenchSettings(workload=load_workload("smoke"), max_tokens=8, warmup_requests=0)


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_bench_by_url_records_sglang_and_what_it_serves(path: str) -> None:
    with FakeOpenAIServer(server_info=real_info("eagle3"), server_info_path=path) as server:
        report = run_benchmark_sync(Endpoint(server.url), smoke())
    config = report.config
    assert (config.engine, config.engine_version) == ("sglang", "0.5.16")
    assert (config.method, config.num_speculative_tokens) == ("eagle3", 4)
    assert all(config.resolved_from[key] == "server" for key in ("engine", "method"))
    assert report.warnings == []


def test_a_claim_the_server_contradicts_is_warned_and_the_servers_recorded() -> None:
    told = ResolvedConfig(method="dflash", num_speculative_tokens=7)
    with FakeOpenAIServer(server_info=real_info("ngram")) as server:
        report = run_benchmark_sync(Endpoint(server.url), smoke(), told)
    assert (report.config.method, report.config.num_speculative_tokens) == ("ngram", 4)
    assert report.warnings[0] == (
        "the server reports it speculates with ngram k=4, the run was told dflash k=7: the "
        "report records the server's"
    )


def test_a_claim_the_server_agrees_with_is_kept_quietly() -> None:
    for told in (
        ResolvedConfig(method="ngram", num_speculative_tokens=4),
        ResolvedConfig(method="ngram"),  # k comes from the server
    ):
        with FakeOpenAIServer(server_info=real_info("ngram")) as server:
            report = run_benchmark_sync(Endpoint(server.url), smoke(), told)
        assert (report.config.method, report.config.num_speculative_tokens) == ("ngram", 4)
        assert report.warnings == []


def test_vllm_is_not_named_from_its_version_alone() -> None:
    with FakeOpenAIServer() as server:
        report = run_benchmark_sync(Endpoint(server.url), smoke())
    assert report.config.engine is None and report.config.engine_version == "0.32.0"
    assert report.config.method is None
