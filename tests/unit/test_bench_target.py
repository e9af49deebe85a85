"""`bench NAME` resolution (inventory + playbook + deployed.json), settings from a playbook, and
the log-window check against counter deltas (pure functions, canned inputs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dflashops.bench.client import RequestOptions, build_payload
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import BenchReport
from dflashops.bench.progress import SayProgress, as_progress
from dflashops.bench.server_log import LogRead, check_window
from dflashops.bench.settings import BenchSettings
from dflashops.bench.target import (
    redact_argv,
    resolve_target,
    server_url,
)
from dflashops.bench.workload import PromptSpec
from dflashops.cli import cli
from dflashops.errors import BenchmarkError, SecretError
from dflashops.inventory.models import Container
from dflashops.metrics.spec_decode import SpecDecodeDelta
from dflashops.playbook.models import Bench, Playbook
from tests.support.manifests import deployed_manifest
from tests.unit.test_bench_client import FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]


def container(**fields: Any) -> Container:
    return Container.model_validate({"name": "ct1", "cluster": "c", "node": "n", **fields})


def playbook(**server: Any) -> Playbook:
    return Playbook.model_validate(
        {
            "name": "book",
            "model": {"path": "/models/target", "repo": "org/target", "served_name": "tgt"},
            "drafter": {"method": "dflash", "model": {"path": "/models/drafter"}},
            "engine": {"version": "0.34.0"},
            "server": {"port": 30000, "num_speculative_tokens": 6, **server},
            "bench": {"workload": "mixed", "concurrency": [1, 4], "requests": 3},
        }
    )


STATIC = {"network": {"ip": "10.200.0.10/24"}}


def test_playbook_alone_gives_address_port_and_config() -> None:
    target = resolve_target("ct1", container(**STATIC), playbook(), None, environ={})
    assert target.endpoint.base_url == "http://10.200.0.10:30000"
    assert target.endpoint.model == "tgt" and target.endpoint.api_key is None
    config = target.config
    assert (config.container, config.playbook, config.engine_version) == ("ct1", "book", "0.34.0")
    assert (config.method, config.num_speculative_tokens) == ("dflash", 6)
    assert (config.model, config.drafter) == ("org/target", "/models/drafter")
    assert set(config.resolved_from.values()) == {"inventory", "playbook"}
    assert target.log_path == "/var/log/dflashops/server.log"
    assert target.stats_interval_s == 10.0


def test_manifest_wins_over_the_playbook() -> None:
    manifest = deployed_manifest(
        endpoint="http://0.0.0.0:31000/v1",
        engine_version="0.32.0",
        method="eagle3",
        num_speculative_tokens=4,
        served_model_name="live",
        spec={
            "argv": ["vllm", "serve", "--served-model-name", "live", "--api-key=s3cret"],
            "env": {"VLLM_LOG_STATS_INTERVAL": "2.5", "HF_TOKEN": "hf_x"},
            "model": "/models/target",
        },
    )
    target = resolve_target(
        "ct1", container(**STATIC), playbook(), manifest, environ={}, log_path="/srv/server.log"
    )
    assert target.endpoint.base_url == "http://10.200.0.10:31000"  # 0.0.0.0 → the container
    config = target.config
    assert (config.engine_version, config.method, config.num_speculative_tokens) == (
        "0.32.0",
        "eagle3",
        4,
    )
    assert config.served_model_name == "live" and target.endpoint.model == "live"
    assert config.resolved_from["url"] == config.resolved_from["method"] == "deployed.json"
    assert config.server_args["argv"][-1] == "--api-key=***"
    assert config.server_args["env"]["HF_TOKEN"] == "***"
    assert (target.stats_interval_s, target.log_path) == (2.5, "/srv/server.log")


def test_reading_notes_are_carried() -> None:
    notes = ["deployed.json: not a dflashops manifest (port: …); ignored"]
    target = resolve_target("ct1", container(**STATIC), playbook(), None, environ={}, notes=notes)
    assert list(target.notes) == notes
    assert target.config.resolved_from["url"] == "playbook"


def test_the_playbooks_bench_api_unless_the_command_names_one() -> None:
    book = playbook().model_copy(update={"bench": Bench(api="completions")})
    ct = container(**STATIC)
    assert resolve_target("ct1", ct, book, None, environ={}).endpoint.api == "completions"
    assert resolve_target("ct1", ct, book, None, api="chat", environ={}).endpoint.api == "chat"
    assert resolve_target("ct1", ct, playbook(), None, environ={}).endpoint.api == "chat"


def test_no_way_to_the_server_is_an_error() -> None:
    with pytest.raises(BenchmarkError, match=r"nothing deployed by launch, and no "):
        resolve_target("ct1", container(**STATIC), None, None, environ={})
    with pytest.raises(BenchmarkError, match=r"the container has no address"):
        resolve_target("ct1", container(), playbook(), None, environ={})


def test_api_key_comes_from_the_named_variable_only() -> None:
    book = playbook(api_key_env="VLLM_API_KEY")
    with pytest.raises(SecretError, match=r"\$VLLM_API_KEY, which is not set"):
        resolve_target("ct1", container(**STATIC), book, None, environ={})
    target = resolve_target(
        "ct1", container(**STATIC), book, None, environ={"VLLM_API_KEY": "k-123"}
    )
    assert target.endpoint.headers() == {"Authorization": "Bearer k-123"}
    assert "k-123" not in target.config.model_dump_json()


def test_disabled_log_stats_skips_the_log() -> None:
    book = playbook(extra_args=["--disable-log-stats"])
    target = resolve_target("ct1", container(**STATIC), book, None, environ={})
    assert target.log_path is None
    assert any("--disable-log-stats" in note for note in target.notes)


def test_server_url_rewrites_only_the_servers_own_view() -> None:
    assert server_url("http://0.0.0.0:1/v1", "10.200.0.10") == "http://10.200.0.10:1/v1"
    assert server_url("http://127.0.0.1:1", "10.200.0.10") == "http://10.200.0.10:1"
    assert server_url("http://127.0.0.1:1", "127.0.0.1") == "http://127.0.0.1:1"
    assert server_url("http://10.1.2.3:1", "10.200.0.10") == "http://10.1.2.3:1"
    assert server_url("http://[::]:1", "fd00::5") == "http://[fd00::5]:1"


def test_redact_argv() -> None:
    assert redact_argv(["a", "--api-key", "x", "--hf-token=y", "--port", "1"]) == [
        "a",
        "--api-key",
        "***",
        "--hf-token=***",
        "--port",
        "1",
    ]


def test_settings_from_playbook_with_overrides() -> None:
    settings = BenchSettings.from_playbook(playbook(), concurrency=[2], thinking=False)
    assert settings.workload.name == "mixed"
    assert (settings.concurrency, settings.requests, settings.thinking) == ((2,), 3, False)
    assert (settings.max_tokens, settings.ignore_eos) == (2000, True)  # the playbook defaults
    default = BenchSettings.from_playbook(None)
    assert (default.workload.name, default.concurrency, default.warmup_requests) == (
        "smoke",
        (1,),
        1,
    )
    assert default.max_tokens is None and default.ignore_eos is None


def test_a_plain_callable_is_a_progress() -> None:
    said: list[str] = []
    progress = as_progress(said.append)
    assert isinstance(progress, SayProgress)
    progress.phase("warm-up")
    progress.start_level(4, 2)
    assert said == ["warm-up", "concurrency 4: 0/2 requests"]
    assert as_progress(progress) is progress


# --------------------------------------------------------------------------- log windows

LINE = (
    "(APIServer pid=7) INFO 12-02 14:59:{s:02d} [metrics.py:120] SpecDecoding metrics: "
    "Mean acceptance length: {mal:.2f}, Accepted throughput: 1.00 tokens/s, Drafted "
    "throughput: 2.00 tokens/s, Accepted: {a} tokens, Drafted: {d} tokens, Per-position "
    "acceptance rate: {rates}, Avg Draft acceptance rate: {pct:.1f}%"
)


def window(drafts: int, per_position: list[int], second: int = 0) -> str:
    accepted = sum(per_position)
    return LINE.format(
        s=second,
        mal=1 + accepted / drafts,
        a=accepted,
        d=4 * drafts,
        rates=", ".join(f"{n / drafts:.3f}" for n in per_position),
        pct=100 * accepted / (4 * drafts),
    )


def delta(drafts: int, per_position: list[int]) -> SpecDecodeDelta:
    return SpecDecodeDelta(
        num_drafts=drafts,
        num_draft_tokens=4 * drafts,
        num_accepted_tokens=sum(per_position),
        accepted_per_position=per_position,
    )


def read(*lines: str, rotated: bool = False) -> LogRead:
    text = "\n".join(lines) + "\n"
    return LogRead(path="/x.log", offset=10, text=text, size=99, rotated=rotated)


def test_windows_that_add_up_agree() -> None:
    log = read(window(20, [15, 10, 6, 2]), "noise", window(13, [9, 5, 3, 1], 1))
    check, warnings = check_window(log, delta(33, [24, 15, 9, 3]), concurrency=2)
    assert warnings == [] and check.agrees is True
    assert (check.accepted_tokens, check.drafted_tokens, check.spec_decode_windows) == (51, 132, 2)
    assert check.num_drafts == 33 and check.num_drafts_exact


def test_a_straddling_window_disagrees() -> None:
    log = read(window(20, [15, 10, 6, 2]), window(13, [9, 5, 3, 1], 1))
    check, (warning,) = check_window(log, delta(20, [15, 10, 6, 2]), concurrency=1)
    assert check.agrees is False
    assert "concurrency 1: server log and /metrics disagree (Accepted 51 vs 33" in warning


def test_counters_without_log_lines_disagree() -> None:
    check, (warning,) = check_window(read("nothing here"), delta(5, [1, 0, 0, 0]), concurrency=1)
    assert check.agrees is False and "no SpecDecoding line" in warning


def test_nothing_drafted_nothing_logged_is_consistent() -> None:
    check, warnings = check_window(read("idle"), delta(0, []), concurrency=1)
    assert warnings == [] and check.agrees is True


def test_a_rotated_log_is_flagged() -> None:
    log = read(window(20, [15, 10, 6, 2]), rotated=True)
    _, warnings = check_window(log, delta(20, [15, 10, 6, 2]), concurrency=1)
    assert len(warnings) == 1 and "shrank during the level" in warnings[0]


def test_sglang_lines_are_not_compared() -> None:
    line = (
        "[2026-12-02 14:59:00 TP0] Decode batch, #running-req: 1, #token: 90, token usage: 0.01, "
        "accept len: 2.50, accept rate: 0.40, cuda graph: True, gen throughput (token/s): 50.0, "
        "#queue-req: 0"
    )
    check, (warning,) = check_window(read(line), None, concurrency=1)
    assert check.agrees is None and "not compared" in warning


# --------------------------------------------------------------------------- --url with a playbook


def test_thinking_is_a_chat_template_kwarg() -> None:
    prompt = PromptSpec(id="p", prompt="hi")
    chat = Endpoint("http://127.0.0.1:1")
    off = build_payload(chat, "m", prompt, RequestOptions(max_tokens=8, thinking=False))
    assert off["chat_template_kwargs"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in build_payload(
        chat, "m", prompt, RequestOptions(max_tokens=8)
    )


def test_url_with_a_playbook(tmp_path: Path) -> None:
    book = playbook().model_dump(mode="json")
    book["model"]["served_name"] = "tiny"  # what the fake server serves
    book["bench"] = {"workload": "smoke", "requests": 2, "max_tokens": 12, "thinking": True}
    path = tmp_path / "book.yaml"
    path.write_text(json.dumps(book))
    out = tmp_path / "r.json"
    with FakeOpenAIServer(first_delay=0.0, chunk_delay=0.0) as srv:
        args = ["bench", "--url", srv.url, "-p", str(path), "--json", "--out", str(out)]
        result = CliRunner().invoke(cli, args)
        sent = srv.payloads[-1]
    assert result.exit_code == 0, result.output
    report = BenchReport.load(out)
    assert (report.config.playbook, report.config.method, report.config.num_speculative_tokens) == (
        "book",
        "dflash",
        6,
    )
    assert report.config.resolved_from["playbook"] == "playbook"
    assert report.levels[0].completed == 2 and report.workload.thinking is True
    assert sent["chat_template_kwargs"] == {"enable_thinking": True}
    assert sent["max_tokens"] == 12 and sent["ignore_eos"] is True  # the playbook's bench


def test_url_with_a_playbook_that_benches_completions(tmp_path: Path) -> None:
    book = playbook().model_dump(mode="json")
    book["model"]["served_name"] = "tiny"
    book["bench"] = {"workload": "smoke", "requests": 2, "max_tokens": 12, "api": "completions"}
    path = tmp_path / "book.yaml"
    path.write_text(json.dumps(book))
    out = tmp_path / "r.json"
    with FakeOpenAIServer(first_delay=0.0, chunk_delay=0.0, chat_template=False) as srv:
        args = ["bench", "--url", srv.url, "-p", str(path), "--json", "--out", str(out)]
        result = CliRunner().invoke(cli, args)
        refused = CliRunner().invoke(cli, [*args[:-2], "--api", "chat"])
    assert result.exit_code == 0, result.output
    assert BenchReport.load(out).workload.api == "completions"
    assert refused.exit_code != 0 and "--api completions" in refused.output


def test_url_with_a_playbook_key_variable_that_is_unset(tmp_path: Path) -> None:
    path = tmp_path / "book.yaml"
    path.write_text(json.dumps(playbook(api_key_env="DFO_TEST_KEY").model_dump(mode="json")))
    result = CliRunner().invoke(
        cli, ["bench", "--url", "http://127.0.0.1:9", "-p", str(path)], env={"DFO_TEST_KEY": ""}
    )
    assert result.exit_code == 1
    assert "$DFO_TEST_KEY, which is not set" in result.stderr
