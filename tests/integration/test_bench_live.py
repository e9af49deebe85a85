"""`bench` against real vLLM CPU servers (DFlash, n-gram, decaying draft), with the server log
read over real SSH (the loopback sshd: the pool's server log is a local file).

The ground truth is independent of the code under test: the responses' ``usage`` must add up to
the server's own generation-token counter over each level, and the log window's raw
``Accepted``/``Drafted`` integers (re-read here with a plain regex) must equal the ``/metrics``
deltas, position by position.
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dflashops.bench.container import bench_container
from dflashops.bench.endpoint import Endpoint
from dflashops.bench.models import BenchReport, LevelResult
from dflashops.bench.runner import run_benchmark_sync
from dflashops.bench.server_log import RATE_TOLERANCE, LogRead, RemoteServerLog
from dflashops.bench.settings import BenchSettings
from dflashops.bench.workload import REFERENCE_PROMPT, PromptSpec, Workload, load_jsonl
from dflashops.cli import cli
from dflashops.deployment.layout import Layout
from dflashops.inventory.load import Inventory, load_inventory
from dflashops.lab.host_model import SshHost
from dflashops.playbook.models import Playbook
from dflashops.roofline.request import RooflineRequest
from tests.support.manifests import deployed_manifest
from tests.support.ssh_hosts import connect_to
from tests.support.vllm_servers import MODEL_NAME, NUM_SPECULATIVE_TOKENS, VllmServer

pytestmark = pytest.mark.vllm

CONTAINER = "bench-ct"
INTERVAL_ENV = {"VLLM_LOG_STATS_INTERVAL": "1"}
SPEC_LINE = re.compile(r"SpecDecoding metrics: .*?Accepted: (\d+) tokens, Drafted: (\d+) tokens")


def inventory_for(host: SshHost, tmp_path: Path) -> Inventory:
    """An inventory whose one container is the loopback sshd (its server: the pool's)."""
    path = tmp_path / "inventory.yaml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version: 1
            clusters:
              lab:
                api_url: https://127.0.0.1:8006
                auth: {{user: root@pam, password: {{env: UNUSED_PVE_PASSWORD}}}}
                nodes: {{lab: {{}}}}
            containers:
              {CONTAINER}:
                vmid: 900
                ssh:
                  host: 127.0.0.1
                  port: {host.port}
                  user: {host.user}
                  key_file: {host.key_file}
                  known_hosts: {host.known_hosts}
            """
        )
    )
    # the loopback SSH host is not a PVE container: the PVE check is skipped, as the operator
    # would with --skip-pve-check
    return load_inventory(path).without_pve_check()


def playbook_for(server: VllmServer, **bench: Any) -> Playbook:
    config = json.loads(server.spec.argv[server.spec.argv.index("--speculative-config") + 1])
    drafter: dict[str, Any] = {"method": config["method"]}
    if server.spec.drafter:
        drafter["model"] = {"path": server.spec.drafter}
    return Playbook.model_validate(
        {
            "name": f"test-{server.kind}",
            "container": CONTAINER,
            "model": {"path": server.spec.model, "served_name": MODEL_NAME},
            "drafter": drafter,
            "engine": {"name": "vllm", "version": "0.32.0"},
            "server": {
                "device": "cpu",
                "port": server.port,
                "max_model_len": 512,
                "num_speculative_tokens": NUM_SPECULATIVE_TOKENS,
                "env": INTERVAL_ENV,
            },
            "bench": {"warmup_requests": 1, "temperature": 0, **bench},
        }
    )


def prompts_workload(server: VllmServer, kind: str, tmp_path: Path, count: int) -> Workload:
    path = tmp_path / f"{kind}.jsonl"
    records = server.models.read_prompts(kind)[:count]
    path.write_text(
        "".join(json.dumps({"id": r["id"], "prompt": r["prompt"]}) + "\n" for r in records)
    )
    return load_jsonl(path)


def decay_prompt(server: VllmServer) -> PromptSpec:
    record = server.models.read_prompts("decay")[0]
    return PromptSpec(id=record["id"], prompt=record["prompt"])


def raw_log_counts(log: Path, level: LevelResult) -> tuple[int, int, int]:
    """(Accepted, Drafted, lines) summed over the level's log window, read here directly."""
    check = level.server_log
    assert check is not None
    with log.open("rb") as handle:
        handle.seek(check.offset)
        text = handle.read(check.bytes_read).decode("utf-8", errors="replace")
    found = [(int(a), int(d)) for a, d in SPEC_LINE.findall(text)]
    return sum(a for a, _ in found), sum(d for _, d in found), len(found)


def assert_server_side_matches(report: BenchReport, server: VllmServer) -> None:
    for level in report.levels:
        where = f"concurrency {level.max_concurrency}"
        assert level.failed == 0, (where, level.errors)
        assert level.completed == report.workload.requests_per_level
        # our usage totals == the server's own counter over the same window (warm-up excluded)
        assert level.total_output_tokens == level.server_generation_tokens, where
        assert level.warnings == [], level.warnings
        check = level.server_log
        assert check is not None and check.agrees is True, (where, check)
        accepted, drafted, lines = raw_log_counts(server.log_path, level)
        assert lines == check.spec_decode_windows > 0
        assert (accepted, drafted) == (check.accepted_tokens, check.drafted_tokens)
        assert accepted == level.spec_decode_accepted_tokens
        assert drafted == level.spec_decode_draft_tokens
        # per position: the counters' rates against the log lines' (three decimals each)
        drafts = level.spec_decode_num_drafts
        counter_rates = level.spec_decode_per_position_acceptance_rates
        assert drafts and counter_rates and len(counter_rates) == NUM_SPECULATIVE_TOKENS
        per_position = [round(rate * drafts) for rate in counter_rates]
        assert sum(per_position) == accepted  # integer counts per position add up to Accepted
        assert check.num_drafts == drafts or not check.num_drafts_exact
        tolerance = RATE_TOLERANCE if check.num_drafts_exact else 0.01
        for logged, counted in zip(check.per_position_acceptance, counter_rates, strict=True):
            assert abs(logged - counted) <= tolerance + 1e-9, (where, logged, counted)


# --------------------------------------------------------------------------- DFlash


def test_dflash_bench_container_with_manifest(
    dflash_server: VllmServer, loopback_host: SshHost, tmp_path: Path
) -> None:
    """deployed.json wins over the playbook (its URL, k, version, argv); levels 1 and 2."""
    argv = [*dflash_server.spec.argv, "--api-key", "not-a-real-key"]
    manifest = deployed_manifest(
        endpoint=f"http://0.0.0.0:{dflash_server.port}/v1",
        engine_version="0.32.0",
        method="dflash",
        num_speculative_tokens=NUM_SPECULATIVE_TOKENS,
        served_model_name=MODEL_NAME,
        playbook="from-the-manifest",
        spec={
            "argv": argv,
            "env": {**INTERVAL_ENV, "HF_TOKEN": "hf_secret"},
            "model": dflash_server.spec.model,
            "drafter": dflash_server.spec.drafter,
        },
    )
    (tmp_path / "deployed.json").write_bytes(manifest.to_bytes())
    book = playbook_for(dflash_server).model_copy(update={"name": "test-playbook"})
    stale = book.model_copy(update={"server": book.server.model_copy(update={"port": 9})})
    settings = BenchSettings.from_playbook(
        stale, workload="smoke", concurrency=(1, 2), requests=2, max_tokens=48, thinking=False
    )
    report = bench_container(
        inventory_for(loopback_host, tmp_path),
        CONTAINER,
        stale,
        settings,
        layout=Layout(etc=str(tmp_path)),
        log_path=str(dflash_server.log_path),
        environ={},
        roofline=RooflineRequest(bandwidth_gbps=50),  # a CPU server has no GPU table entry
    )
    assert_server_side_matches(report, dflash_server)
    # the roofline sized the weights in the container's model dir (the manifest's), over SSH
    roof = report.roofline
    assert roof is not None
    model_dir = Path(dflash_server.spec.model)
    weights = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    assert roof["bytes_per_step"] == weights > 0
    assert roof["sources"]["weights"].startswith(f"safetensors file sizes in {model_dir}")
    assert roof["sources"]["bandwidth"] == "--bandwidth-gbps"
    level_1 = report.level(1)
    assert level_1 is not None and level_1.mean_tpot_ms
    assert roof["measured_tok_s"] == pytest.approx(1000 / level_1.mean_tpot_ms)
    assert roof["acceptance_length"] == level_1.spec_decode_acceptance_length
    config = report.config
    assert config.url == f"http://127.0.0.1:{dflash_server.port}"  # 0.0.0.0 → the container
    assert config.resolved_from["url"] == "deployed.json"
    assert (config.method, config.num_speculative_tokens) == ("dflash", NUM_SPECULATIVE_TOKENS)
    assert config.engine_version == "0.32.0" and config.playbook == "from-the-manifest"
    assert config.drafter == dflash_server.spec.drafter
    assert config.server_log == str(dflash_server.log_path)
    assert "not-a-real-key" not in report.model_dump_json()
    assert "hf_secret" not in report.model_dump_json()
    assert config.server_args["argv"][-1] == "***"
    assert report.workload.thinking is False and report.workload.max_tokens == 48
    assert [lv.max_concurrency for lv in report.levels] == [1, 2]
    # the pool's server has no VLLM_SERVER_DEV_MODE: no reset, said once, quietly
    assert all(lv.prefix_cache_reset is None for lv in report.levels)
    assert sum("prefix cache not reset" in note for note in report.notes) == 1
    assert report.warnings == []


def test_dflash_reference_request_is_capped_with_a_warning(
    dflash_server: VllmServer, loopback_host: SshHost, tmp_path: Path
) -> None:
    """No manifest: the playbook gives the port; the 2000-token reference request is capped."""
    book = playbook_for(dflash_server, workload="smoke", concurrency=[1], requests=1)
    settings = BenchSettings.from_playbook(book)
    assert settings.workload.prompts[0].prompt == REFERENCE_PROMPT
    report = bench_container(
        inventory_for(loopback_host, tmp_path),
        CONTAINER,
        book,
        settings,
        layout=Layout(etc=str(tmp_path / "absent")),
        log_path=str(dflash_server.log_path),
        environ={},
    )
    assert_server_side_matches(report, dflash_server)
    (capped,) = report.warnings
    assert "max_tokens 2000 capped to" in capped and "max_model_len 512" in capped
    record = report.levels[0].requests[0]
    assert record.max_tokens is not None and 300 < record.max_tokens < 512
    assert record.output_tokens == record.max_tokens  # ignore_eos (the playbook default)
    assert report.config.resolved_from["url"] == "playbook"
    assert any("no " in n and "absent/deployed.json" in n for n in report.notes)


def test_dflash_cli_bench_url_skips_the_log(dflash_server: VllmServer, tmp_path: Path) -> None:
    out = tmp_path / "url.json"
    args = ["bench", "--url", dflash_server.base_url, "-n", "1", "--max-tokens", "24", "--json"]
    result = CliRunner().invoke(cli, [*args, "--ignore-eos", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = BenchReport.load(out)
    (level,) = report.levels
    assert level.server_log is None
    assert level.total_output_tokens == level.server_generation_tokens == 24
    assert any(note.startswith("server log not read: --url") for note in report.notes)
    assert json.loads(result.stdout)["reports"][0]["config"]["engine_version"] == "0.32.0"


def test_dflash_cli_bench_name(
    dflash_server: VllmServer, loopback_host: SshHost, tmp_path: Path
) -> None:
    if Path("/etc/dflashops/deployed.json").exists():
        pytest.skip("this machine has an /etc/dflashops/deployed.json, which `bench NAME` reads")
    inventory = inventory_for(loopback_host, tmp_path)
    book = tmp_path / "book.yaml"
    book.write_text(json.dumps(playbook_for(dflash_server).model_dump(mode="json")))
    out = tmp_path / "name.json"
    args = ["-i", str(inventory.path), "bench", CONTAINER, "-p", str(book), "-n", "1", "-c", "1"]
    args.append("--skip-pve-check")  # the inventory's cluster is no PVE: said, and it goes on
    extra = ["--max-tokens", "16", "--server-log", str(dflash_server.log_path)]
    result = CliRunner().invoke(cli, [*args, *extra, "--out", str(out)], env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "server log, concurrency 1:" in result.output and "agrees with /metrics" in result.output
    assert "warning: --skip-pve-check: acting on bench-ct" in result.output
    report = BenchReport.load(out)
    assert report.config.container == CONTAINER and report.config.playbook == "test-dflash"
    assert report.roofline is None  # a CPU server: said why, and what would give one
    assert any(n.startswith("no roofline: the server runs on cpu") for n in report.notes)
    assert_server_side_matches(report, dflash_server)


# --------------------------------------------------------------------------- n-gram


def test_ngram_bench_container(
    ngram_server: VllmServer, loopback_host: SshHost, tmp_path: Path
) -> None:
    workload = prompts_workload(ngram_server, "ngram", tmp_path, 4)
    settings = BenchSettings(
        workload=workload, concurrency=(1, 4), requests=4, max_tokens=48, ignore_eos=True
    )
    report = bench_container(
        inventory_for(loopback_host, tmp_path),
        CONTAINER,
        playbook_for(ngram_server),
        settings,
        layout=Layout(etc=str(tmp_path / "absent")),
        log_path=str(ngram_server.log_path),
        environ={},
    )
    assert_server_side_matches(report, ngram_server)
    assert report.config.method == "ngram"
    assert all((lv.spec_decode_acceptance_length or 0) > 1.0 for lv in report.levels)


# --------------------------------------------------------------------------- decaying draft


def test_decay_bench_container(
    decay_server: VllmServer, loopback_host: SshHost, tmp_path: Path
) -> None:
    workload = prompts_workload(decay_server, "decay", tmp_path, 4)
    settings = BenchSettings(
        workload=workload, concurrency=(2,), requests=4, max_tokens=32, ignore_eos=True
    )
    report = bench_container(
        inventory_for(loopback_host, tmp_path),
        CONTAINER,
        playbook_for(decay_server),
        settings,
        layout=Layout(etc=str(tmp_path / "absent")),
        log_path=str(decay_server.log_path),
        environ={},
    )
    assert_server_side_matches(report, decay_server)
    (level,) = report.levels
    rates = level.spec_decode_per_position_acceptance_rates
    assert rates is not None and rates[0] > rates[-1]  # the draft's acceptance decays


def test_decay_without_log_access_still_counts(decay_server: VllmServer) -> None:
    """`--url` style: no log, yet usage totals equal the generation counter delta."""
    workload = Workload(name="one", prompts=(decay_prompt(decay_server),))
    report = run_benchmark_sync(
        Endpoint(decay_server.base_url),
        BenchSettings(workload=workload, concurrency=(1,), requests=2, max_tokens=16),
    )
    (level,) = report.levels
    assert level.server_log is None
    assert level.completed == 2
    assert level.total_output_tokens == level.server_generation_tokens


class EarlyWindow:
    """The server log over SSH, but each window opens one SpecDecoding line early, as when the
    warm-up's last stats window straddles the level boundary."""

    def __init__(self, inner: RemoteServerLog, local: Path) -> None:
        self.inner = inner
        self.local = local
        self.path = inner.path

    def size(self) -> int:
        head = self.local.read_bytes()[: self.inner.size()]
        line = head.rfind(b"SpecDecoding metrics:")
        assert line > 0, "the warm-up left no SpecDecoding line"
        return head.rfind(b"\n", 0, line) + 1

    def read_from(self, offset: int) -> LogRead:
        return self.inner.read_from(offset)


def test_decay_straddling_window_is_a_warning(
    decay_server: VllmServer, loopback_host: SshHost
) -> None:
    workload = Workload(name="decay", prompts=(decay_prompt(decay_server),))
    settings = BenchSettings(workload=workload, requests=2, max_tokens=24, ignore_eos=True)
    with connect_to(loopback_host) as conn:
        log = EarlyWindow(RemoteServerLog(conn, str(decay_server.log_path)), decay_server.log_path)
        report = run_benchmark_sync(
            Endpoint(decay_server.base_url), settings, server_log=log, stats_interval_s=1.0
        )
    (level,) = report.levels
    assert level.server_log is not None and level.server_log.agrees is False
    _, drafted, _ = raw_log_counts(decay_server.log_path, level)
    assert drafted > (level.spec_decode_draft_tokens or 0)  # the extra line is counted in the log
    (warning,) = level.warnings
    assert "server log and /metrics disagree" in warning and "Drafted" in warning
    # the counters themselves still match what the responses say
    assert level.total_output_tokens == level.server_generation_tokens


def test_decay_missing_server_log_is_a_note(
    decay_server: VllmServer, loopback_host: SshHost, tmp_path: Path
) -> None:
    workload = Workload(name="one", prompts=(decay_prompt(decay_server),))
    report = bench_container(
        inventory_for(loopback_host, tmp_path),
        CONTAINER,
        playbook_for(decay_server),
        BenchSettings(workload=workload, requests=1, max_tokens=8, ignore_eos=True),
        layout=Layout(etc=str(tmp_path / "absent")),
        log_path=str(tmp_path / "no-such.log"),
        environ={},
    )
    (level,) = report.levels
    assert level.completed == 1 and level.server_log is None
    assert level.total_output_tokens == level.server_generation_tokens == 8
    (note,) = [n for n in report.notes if n.startswith("server log not read")]
    assert "no-such.log" in note
    assert report.config.server_log is None
