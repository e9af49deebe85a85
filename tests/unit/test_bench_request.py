"""``BenchRequest``: which options go together, the settings and labels it resolves, and
``run_bench`` on a URL (a real run against the local streaming server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from dflashops.bench.entry import URL_API_KEY_ENV, nothing_completed, run_bench
from dflashops.bench.models import BenchReport, LevelResult, ResolvedConfig
from dflashops.bench.request import BenchRequest, RecordedLabels, SettingsRequest
from dflashops.cli import cli
from dflashops.inventory.load import Inventory
from dflashops.playbook.models import Playbook
from dflashops.pydantic_errors import first_error_line
from dflashops.roofline.request import RooflineRequest
from tests.unit.test_bench_client import FakeOpenAIServer

URL = "http://127.0.0.1:9"


def refusal(**fields: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        BenchRequest.model_validate(fields)
    return first_error_line(caught.value, fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "no server: give a container NAME or --url URL"),
        ({"container": "ct", "url": URL}, "give a container NAME or --url URL, not both"),
        ({"container": "ct", "api_key_env": "KEY"}, "--api-key-env goes with --url"),
        ({"container": "ct", "model": "m"}, "--model goes with --url"),
        ({"url": URL, "server_log": "/var/log/x"}, "--server-log is for NAME"),
        ({"url": URL, "no_roofline": True}, "--no-roofline is for NAME"),
        (
            {"container": "ct", "no_roofline": True, "roofline": {"gpu": "H200"}},
            "--gpu describes the roofline, which --no-roofline skips",
        ),
        ({"url": URL, "roofline": {"tp": 2}}, "--tp is for the roofline: give --gpu"),
        ({"url": URL, "roofline": {"gpu": "H200"}}, "with --url the roofline needs --weights"),
        ({"url": URL, "settings": {"concurrency": [1, 0]}}, "settings.concurrency"),
        ({"url": URL, "labels": {"num_speculative_tokens": -1}}, "num_speculative_tokens"),
        ({"url": URL, "api": "responses"}, "api"),
        ({"url": URL, "wokload": "smoke"}, "unknown key"),
    ],
)
def test_option_combinations_that_mean_nothing_are_refused(
    fields: dict[str, Any], message: str
) -> None:
    assert message in refusal(**fields)


def test_what_each_target_accepts() -> None:
    name = BenchRequest(container="ct", server_log="/srv/log", roofline=RooflineRequest(tp=2))
    assert name.container_roofline == RooflineRequest(tp=2)  # the container names the GPU
    assert BenchRequest(container="ct", no_roofline=True).container_roofline is None
    url = BenchRequest(
        url=URL,
        model="m",
        api_key_env="KEY",
        roofline=RooflineRequest(gpu="H200", weights="1GB"),
    )
    assert url.roofline.names_hardware


def test_labels_are_recorded_with_their_source() -> None:
    config = ResolvedConfig(method="dflash", resolved_from={"method": "playbook", "url": "server"})
    recorded = RecordedLabels(method="ngram", num_speculative_tokens=3).apply(config)
    assert (recorded.method, recorded.num_speculative_tokens) == ("ngram", 3)
    assert recorded.resolved_from == {
        "method": "command line",
        "url": "server",
        "num_speculative_tokens": "command line",
    }
    assert RecordedLabels().apply(config) is config


def test_settings_given_win_over_the_playbooks() -> None:
    book = Playbook.model_validate(
        {
            "name": "b",
            "model": {"path": "/m"},
            "engine": {"name": "vllm", "version": "0.32.0"},
            "bench": {"workload": "mixed", "concurrency": [1, 4], "requests": 3},
        }
    )
    settings = SettingsRequest(concurrency=(2,), label="x").resolve(book)
    assert settings.workload.name == "mixed" and settings.requests == 3
    assert settings.concurrency == (2,) and settings.label == "x"
    assert SettingsRequest().resolve(None).workload.name == "smoke"


def no_inventory() -> Inventory:
    raise AssertionError("a URL bench must not read the inventory")


def test_run_bench_on_a_url_records_labels_before_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(URL_API_KEY_ENV, raising=False)
    with FakeOpenAIServer(first_delay=0.0, chunk_delay=0.0) as srv:
        request = BenchRequest(
            url=srv.url,
            settings=SettingsRequest(requests=2),
            labels=RecordedLabels(method="dflash", num_speculative_tokens=4),
        )
        report = run_bench(request, no_inventory, environ={})
    assert report.config.method == "dflash" and report.config.num_speculative_tokens == 4
    assert report.config.resolved_from["num_speculative_tokens"] == "command line"
    assert report.config.resolved_from["url"] == "server"
    assert report.display_label() == "dflash k=4"
    assert any(note.startswith("server log not read: --url") for note in report.notes)
    assert report.levels[0].completed == 2
    assert nothing_completed(report, tmp_path / "r.json") is None


def test_a_level_where_everything_failed_is_an_error_naming_the_saved_file(tmp_path: Path) -> None:
    level = LevelResult(
        max_concurrency=4,
        completed=0,
        failed=2,
        duration=1.0,
        total_input_tokens=0,
        total_output_tokens=0,
        request_throughput=0.0,
        output_throughput=0.0,
        total_token_throughput=0.0,
        errors=["HTTP 500: boom"],
    )
    report = BenchReport.model_validate(
        {
            "config": {},
            "workload": {
                "name": "smoke",
                "num_prompts": 1,
                "requests_per_level": 2,
                "warmup_requests": 0,
                "max_tokens": 8,
                "temperature": 0.0,
                "ignore_eos": False,
            },
            "levels": [level],
        }
    )
    error = nothing_completed(report, tmp_path / "r.json")
    assert error is not None
    assert error.one_line() == (
        f"every request failed at concurrency 4: HTTP 500: boom "
        f"(hint: the partial result is in {tmp_path / 'r.json'})"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ct", "--api-key-env", "KEY"], "--api-key-env goes with --url"),
        (["ct", "--model", "m"], "--model goes with --url"),
        (["--url", URL, "--server-log", "/var/log/x"], "--server-log is for NAME"),
    ],
)
def test_the_cli_turns_a_refused_request_into_a_usage_error(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert message in result.stderr and result.stdout == ""


def test_the_cli_help_names_the_default_key_variable() -> None:
    result = CliRunner().invoke(cli, ["bench", "--help"], env={"COLUMNS": "200"})
    assert URL_API_KEY_ENV in result.stdout
