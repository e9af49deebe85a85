"""``compare``'s per-method playbooks and loop over injected launch/bench, and the CLI's usage."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.bench.models import BenchReport
from dflashops.cli import cli
from dflashops.errors import TuneInputError
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from dflashops.tune.compare import (
    EngineChoice,
    Skipped,
    WithoutOwnMethod,
    parse_engine_k,
    parse_engines,
    parse_methods,
    playbook_for_engine,
    playbook_for_method,
    run_compare,
    run_engines,
)
from tests.support.reports import bench_report, level_result

REPO = Path(__file__).resolve().parents[2]
DECAY_BOOK = REPO / "playbooks" / "lab-decay.yaml"
RATES = {"draft_model": [0.78, 0.53, 0.43, 0.32], "ngram": [0.4, 0.2, 0.1, 0.05]}


def fake_report(book: Playbook, method: str) -> BenchReport:
    k = book.server.num_speculative_tokens
    rates = RATES.get(method)
    length = 1 + sum(rates) if rates else None
    level = level_result(
        output_throughput=40.0 * (length or 1.0),
        total_token_throughput=140.0,
        mean_tpot_ms=25.0 / (length or 1.0),
        spec_decode_acceptance_length=length,
        spec_decode_per_position_acceptance_rates=rates,
    )
    return bench_report(
        [level],
        workload={"max_tokens": 128},
        container="lab-ct1",
        method=book.drafter.method,
        num_speculative_tokens=k,
    )


def test_each_method_becomes_a_playbook_that_validates() -> None:
    book = load_playbook(DECAY_BOOK)
    assert playbook_for_method(book, "draft_model") is book
    for method in ("none", "ngram"):
        changed = playbook_for_method(book, method)
        assert isinstance(changed, Playbook)
        assert changed.drafter.method == method and changed.drafter.model is None
        assert changed.server.num_speculative_tokens == (None if method == "none" else 4)
        # the same change through the file and --set: the copy is what the loader would make
        overrides = [f"drafter.method={method}", "drafter.model=null"]
        overrides.append(f"server.num_speculative_tokens={'null' if method == 'none' else 4}")
        assert changed == load_playbook(DECAY_BOOK, overrides)
    for method in ("dflash", "eagle3", "mtp"):
        skipped = playbook_for_method(book, method)
        assert isinstance(skipped, Skipped) and "draft_model" in skipped.reason


def test_compare_loop_launches_each_expressible_method_once() -> None:
    book = load_playbook(DECAY_BOOK)
    launched: list[str] = []

    def launch(at: Playbook) -> None:
        launched.append(at.drafter.method)

    outcome = run_compare(book, parse_methods("none,dflash,ngram,draft_model"), launch, fake_report)
    assert launched == ["none", "ngram", "draft_model"]
    assert [row.method for row in outcome.rows] == launched
    assert [item.method for item in outcome.skipped] == ["dflash"]
    none, ngram, draft = outcome.rows
    assert none.k is None and none.acceptance_length is None
    assert draft.k == 4 and draft.per_position_acceptance == (0.78, 0.53, 0.43, 0.32)
    assert draft.output_tok_s > ngram.output_tok_s > none.output_tok_s
    section = outcome.section()
    assert set(section["levels"]) == {"none", "ngram", "draft_model"}


def test_unknown_method_is_refused() -> None:
    with pytest.raises(TuneInputError, match="unknown method 'medusa'"):
        parse_methods("none,medusa")
    result = CliRunner().invoke(cli, ["compare", "lab-ct1", "--methods", "bogus"])
    assert result.exit_code == 2 and "unknown method" in result.output


@pytest.mark.parametrize(
    ("command", "args", "message"),
    [
        ("tune", ["lab-ct1", "--acceptance", "0.5"], "--acceptance is for offline tuning"),
        (
            "tune-offline",
            ["--acceptance", "0.5", "--step-cost", "1:0.02,2:0.03", "--dry-run"],
            "--dry-run is for live tuning: `dflashops tune NAME --dry-run …`",
        ),
        ("tune-offline", ["--acceptance", "0.5", "--budget", "3"], "--budget is for live tuning"),
    ],
)
def test_live_and_offline_options_do_not_mix(command: str, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, [command, *args])
    assert result.exit_code == 2
    assert message in result.output


DFLASH_BOOK = REPO / "playbooks" / "lab-dflash.yaml"


def test_engines_are_parsed_with_their_pinned_releases() -> None:
    assert parse_engines("vllm, sglang==0.5.16,vllm") == [
        EngineChoice("vllm"),
        EngineChoice("sglang", "0.5.16"),
    ]
    with pytest.raises(TuneInputError, match="unknown engine 'trtllm'"):
        parse_engines("vllm,trtllm")
    with pytest.raises(TuneInputError, match="pins no release"):
        parse_engines("sglang==")
    assert parse_engine_k(["vllm=5", "sglang=3"]) == {"vllm": 5, "sglang": 3}
    with pytest.raises(TuneInputError, match="not ENGINE=K"):
        parse_engine_k(["sglang=0"])


def gpu_book(tmp_path: Path) -> Path:
    """The lab DFlash playbook on a GPU host (SGLang runs DFlash on CUDA only)."""
    path = tmp_path / "gpu-dflash.yaml"
    path.write_text(DFLASH_BOOK.read_text().replace("device: cpu", "device: cuda"))
    return path


def test_each_engine_becomes_the_playbook_file_loaded_for_it(tmp_path: Path) -> None:
    book = load_playbook(DFLASH_BOOK)
    assert playbook_for_engine(DFLASH_BOOK, book, EngineChoice("vllm")) is book
    path = gpu_book(tmp_path)
    on_gpu = load_playbook(path)

    sglang = playbook_for_engine(path, on_gpu, EngineChoice("sglang", "0.5.16"), k=3)

    assert isinstance(sglang, Playbook)
    assert (sglang.engine.name, sglang.engine.version) == ("sglang", "0.5.16")
    # the lab playbook's /opt/lab/venv-{engine}-cpu-{version} follows the engine
    assert sglang.engine.base_venv == Path("/opt/lab/venv-sglang-cpu-0.5.16")
    assert sglang.server.num_speculative_tokens == 3
    assert sglang.drafter == on_gpu.drafter


def test_an_engine_without_its_release_is_refused_before_anything_runs() -> None:
    book = load_playbook(DFLASH_BOOK)
    with pytest.raises(TuneInputError, match="give the sglang release"):
        playbook_for_engine(DFLASH_BOOK, book, EngineChoice("sglang"))


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("0.5.3", "drafter.method dflash needs SGLang 0.5.11 or later"),
        ("0.5.16", "SGLang serves dflash on CUDA only"),  # the lab playbook runs on the CPU
    ],
)
def test_an_engine_that_cannot_run_the_own_method_keeps_the_others(version: str, why: str) -> None:
    book = load_playbook(DFLASH_BOOK)

    plain = playbook_for_engine(DFLASH_BOOK, book, EngineChoice("sglang", version), k=3)

    assert isinstance(plain, WithoutOwnMethod)
    assert plain.skipped.engine == f"sglang=={version}" and plain.skipped.method == "dflash"
    assert why in plain.skipped.reason
    assert (plain.book.engine.name, plain.book.engine.version) == ("sglang", version)
    assert plain.book.engine.base_venv == Path(f"/opt/lab/venv-sglang-cpu-{version}")
    assert plain.book.drafter.method == "none" and plain.book.drafter.model is None
    assert plain.book.server.num_speculative_tokens is None and plain.k == 3  # --k, beside
    ngram = playbook_for_method(plain.book, "ngram", own="dflash", k=plain.k)
    if version == "0.5.16":  # 0.5.3's CPU engine has no n-gram
        assert isinstance(ngram, Playbook) and ngram.server.num_speculative_tokens == 3
    eagle3 = playbook_for_method(plain.book, "eagle3", own="dflash")
    assert isinstance(eagle3, Skipped) and "the playbook's drafter is dflash" in eagle3.reason


def test_an_engine_the_playbook_cannot_run_at_all_is_skipped_whole() -> None:
    book = load_playbook(DFLASH_BOOK)

    skipped = playbook_for_engine(DFLASH_BOOK, book, EngineChoice("sglang", "0.5.x"))

    assert isinstance(skipped, Skipped), skipped
    # the reason without "--set:KEY:": compare set the engine, not the operator
    assert skipped.reason == (
        "the playbook cannot run on sglang==0.5.x: pin an exact release such as 0.34.0"
    )


def test_engines_times_methods_each_launch_once_and_rows_name_their_engine() -> None:
    book = load_playbook(DFLASH_BOOK)
    books = [
        book,
        playbook_for_engine(DFLASH_BOOK, book, EngineChoice("sglang", "0.5.16")),
        playbook_for_engine(DFLASH_BOOK, book, EngineChoice("sglang", "0.5.3")),
    ]
    launched: list[tuple[str, str, str, int | None]] = []

    def launch(at: Playbook) -> None:
        k = at.server.num_speculative_tokens
        launched.append((at.engine.name, at.engine.version, at.drafter.method, k))

    outcome = run_engines(books, parse_methods("none,dflash,ngram"), launch, fake_report)

    # SGLang runs DFlash on CUDA only and 0.5.3 has none: their none cells still run (no k),
    # n-gram with the playbook's k, and 0.5.3's CPU engine has no n-gram either
    assert launched == [
        ("vllm", "0.32.0", "none", None),
        ("vllm", "0.32.0", "dflash", 4),
        ("vllm", "0.32.0", "ngram", 4),
        ("sglang", "0.5.16", "none", None),
        ("sglang", "0.5.16", "ngram", 4),
        ("sglang", "0.5.3", "none", None),
    ]
    assert [row.engine for row in outcome.rows] == (
        ["vllm 0.32.0"] * 3 + ["sglang 0.5.16"] * 2 + ["sglang 0.5.3"]
    )
    assert [(item.engine, item.method) for item in outcome.skipped] == [
        ("sglang==0.5.16", "dflash"),
        ("sglang==0.5.3", "dflash"),
        ("sglang 0.5.3", "ngram"),
    ]
    assert "runs ngram from 0.5.16" in outcome.skipped[2].reason
    assert set(outcome.section()["levels"]) == {
        "vllm 0.32.0 none",
        "vllm 0.32.0 dflash",
        "vllm 0.32.0 ngram",
        "sglang 0.5.16 none",
        "sglang 0.5.16 ngram",
        "sglang 0.5.3 none",
    }


def test_compare_options_are_checked_before_anything_runs() -> None:
    result = CliRunner().invoke(cli, ["compare", "lab-ct1", "--engines", "vllm,tgi"])
    assert result.exit_code == 2 and "unknown engine 'tgi'" in result.output
    result = CliRunner().invoke(cli, ["compare", "lab-ct1", "--k", "sglang"])
    assert result.exit_code == 2 and "not ENGINE=K" in result.output


def test_a_cell_whose_launch_fails_is_skipped_with_the_reason_and_the_rest_still_run(
    tmp_path: Path,
) -> None:
    from dflashops.errors import ServerError

    path = gpu_book(tmp_path)
    book = load_playbook(path)
    books = [playbook_for_engine(path, book, EngineChoice("sglang", "0.5.16")), book]

    def launch(at: Playbook) -> None:
        if (at.engine.name, at.drafter.method) == ("sglang", "dflash"):
            raise ServerError("the engine failed: ValueError: Unrecognized model")

    outcome = run_engines(books, parse_methods("none,dflash"), launch, fake_report)

    assert [(row.engine, row.method) for row in outcome.rows] == [
        ("sglang 0.5.16", "none"),
        ("vllm 0.32.0", "none"),
        ("vllm 0.32.0", "dflash"),
    ]
    (failed,) = outcome.skipped
    assert failed.engine == "sglang 0.5.16" and failed.method == "dflash"
    assert failed.reason.startswith("launch failed: the engine failed: ValueError")


def test_a_cell_whose_server_dies_in_bench_is_skipped_and_the_measured_cells_are_kept() -> None:
    from dflashops.bench.stopped import ServerStopped

    book = load_playbook(DECAY_BOOK)

    def bench(at: Playbook, method: str) -> BenchReport:
        if method == "ngram":
            raise ServerStopped("connection refused at http://10.0.0.5:8000/metrics")
        return fake_report(at, method)

    outcome = run_compare(book, parse_methods("none,ngram,draft_model"), lambda _: None, bench)
    assert [row.method for row in outcome.rows] == ["none", "draft_model"]
    (failed,) = outcome.skipped
    assert failed.method == "ngram" and failed.engine == "vllm 0.32.0"
    assert failed.reason == (
        "bench failed: the server stopped answering: connection refused at "
        "http://10.0.0.5:8000/metrics"
    )


def test_a_warm_up_the_server_refuses_stops_the_compare_at_the_first_cell() -> None:
    from dflashops.bench.stopped import WarmupRefused

    book = load_playbook(DECAY_BOOK)
    benched: list[str] = []

    def bench(at: Playbook, method: str) -> BenchReport:
        benched.append(method)
        raise WarmupRefused("the warm-up request failed: HTTP 400: no chat template")

    with pytest.raises(WarmupRefused, match="HTTP 400"):
        run_compare(book, parse_methods("none,ngram,draft_model"), lambda _: None, bench)
    assert benched == ["none"]  # not two more launches to learn the same


def test_only_the_cells_own_outcomes_stay_on_a_terminal() -> None:
    from dflashops.cli.compare import is_cell_outcome

    cells = {"none", "dflash", "sglang==0.5.16"}
    assert is_cell_outcome("dflash: skipped (needs a GPU)", cells)
    assert is_cell_outcome("none: launching on vllm 0.32.0", cells)
    assert is_cell_outcome("sglang==0.5.16: skipped (no release)", cells)
    assert not is_cell_outcome("none: benchmarking", cells)
    # launch's and bench's steps inside a cell: a readiness poll a second, a request count
    assert not is_cell_outcome("loading the model (14s) | INFO: ...", cells)
    assert not is_cell_outcome("concurrency 1: 3/8 requests, 336.2 tok/s", cells)
    assert not is_cell_outcome("preparing the engine venv: create, link-base", cells)
