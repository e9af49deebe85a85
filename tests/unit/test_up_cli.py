"""``dflashops up``'s usage errors and its view, before anything remote."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from dflashops.cli import cli
from dflashops.cli.up_view import render_table
from dflashops.up.outcome import PairResult, UpResult
from dflashops.up.plan import STEPS, PlannedStep
from dflashops.up.record import PairRecord, StepRecord


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DFLASHOPS_UP_STATE", str(tmp_path / "up"))
    (tmp_path / "inventory.yaml").write_text(
        "version: 1\nclusters:\n  c:\n    api_url: https://127.0.0.1:8006\n"
        "    auth: {user: root@pam, password: {env: NOPE}}\n"
        "    nodes: {n: {ssh: {host: 127.0.0.1}}}\n"
        "containers:\n  ct: {vmid: 100, network: {bridge: vmbr0, ip: 127.0.0.2/8}}\n"
    )
    (tmp_path / "nameless.yaml").write_text(
        "version: 1\nname: nameless\n"
        "model: {path: /models/m}\nengine: {name: vllm, version: 0.32.0}\n"
    )
    return tmp_path


def test_help_names_every_step() -> None:
    result = CliRunner().invoke(cli, ["up", "--help"])
    assert result.exit_code == 0
    for step in STEPS:
        assert step in result.output


def test_an_unknown_step_or_a_pairless_playbook_is_a_usage_error(workdir: Path) -> None:
    runner = CliRunner()
    wrong = runner.invoke(cli, ["up", "nameless.yaml", "--from", "banch"])
    assert wrong.exit_code == 2 and "banch" in wrong.output
    nameless = runner.invoke(cli, ["up", "nameless.yaml", "--dry-run"])
    assert nameless.exit_code == 2
    assert "names no container" in nameless.output and "-c CONTAINER" in nameless.output
    unknown = runner.invoke(cli, ["up", "nameless.yaml", "-c", "typo", "--dry-run"])
    assert unknown.exit_code == 2 and "typo" in unknown.output
    assert not (workdir / "up").exists()  # nothing was written


def test_the_end_table_shows_each_pairs_last_step_and_numbers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = PairRecord(
        pair="lab-dflash@lab.lab-ct1", playbook="b.yaml", playbook_name="lab-dflash",
        container="lab-ct1", cluster="lab", node="lab",
    )  # fmt: skip
    record.steps["bench"] = StepRecord(
        status="ok",
        outputs={"output_throughput": 41.53, "spec_decode_acceptance_length": 2.61, "k": 4},
    )
    record.steps["tune"] = StepRecord(
        status="ok",
        outputs={"output_throughput": 47.0, "spec_decode_acceptance_length": 2.4, "k": 3},
    )
    done = PairResult("lab-dflash@lab.lab-ct1", "lab-ct1", "b.yaml", [], "done", "report")
    done.record, done.ran = record, ["tune", "report"]
    failed = PairResult(
        "lab-dflash@lab.lab-ct2", "lab-ct2", "b.yaml", [PlannedStep("drafter", "run", "x")],
        "failed", "drafter", error="cannot read /srv/x",
    )  # fmt: skip
    result = UpResult(pairs=[done, failed], state_dir=Path("/tmp/up"))
    assert not result.ok
    out = io.StringIO()
    console = Console(file=out, width=160, color_system=None)
    monkeypatch.setattr("dflashops.cli.up_view.make_console", lambda stderr=False: console)
    render_table(result)
    text = out.getvalue()
    assert "lab-dflash@lab.lab-ct2: drafter failed: cannot read /srv/x" in text
    assert "47.0" in text and "2.40" in text  # tuned numbers win over the bench's
    row = next(line for line in text.splitlines() if "│" in line and "lab-ct1" in line)
    assert [cell.strip() for cell in row.strip("│ ").split("│")] == [
        "lab-dflash@lab.lab-ct1", "report", "done", "47.0", "2.40", "3",
    ]  # fmt: skip


TWO_CONTAINERS = (
    "version: 1\nclusters:\n  c:\n    api_url: https://127.0.0.1:8006\n"
    "    auth: {user: root@pam, password: {env: NOPE}}\n"
    "    nodes: {n: {ssh: {host: 127.0.0.1}}}\n"
    "containers:\n  ct: {vmid: 100, network: {bridge: vmbr0, ip: 127.0.0.2/8}}\n"
    "  ct2: {vmid: 101, network: {bridge: vmbr0, ip: 127.0.0.3/8}}\n"
)


def broken_record(workdir: Path) -> Path:
    """The pair nameless@c.ct's record, cut short (a full disk, a copy interrupted)."""
    path = workdir / "up" / "nameless@c.ct" / "record.json"
    path.parent.mkdir(parents=True)
    path.write_text('{"pair": "nameless@c.ct", "playbook": "nameless.y')
    return path


def test_json_with_an_unreadable_record_is_one_document_and_exit_2(workdir: Path) -> None:
    path = broken_record(workdir)
    result = CliRunner().invoke(cli, ["up", "nameless.yaml", "-c", "ct", "--json"])
    assert result.exit_code == 2, result.output
    document = json.loads(result.stdout)  # exactly one JSON document, nothing else on stdout
    [pair] = document["pairs"]
    assert document["ok"] is False and pair["outcome"] == "failed"
    assert pair["error"].startswith(f"{path}: not an up run record")
    assert f"delete {path}" in pair["error"] and "--from provision" in pair["error"]


def test_a_dry_run_plans_the_other_pair_beside_an_unreadable_record(workdir: Path) -> None:
    (workdir / "inventory.yaml").write_text(TWO_CONTAINERS)
    path = broken_record(workdir)
    result = CliRunner().invoke(
        cli, ["up", "nameless.yaml", "-c", "ct", "-c", "ct2", "--dry-run", "--json"]
    )
    assert result.exit_code == 2, result.output
    broken, healthy = json.loads(result.stdout)["pairs"]
    assert broken["outcome"] == "failed" and str(path) in broken["error"]
    assert healthy["outcome"] == "planned"
    assert [p["action"] for p in healthy["plan"]] == ["run"] * len(STEPS)
    table = CliRunner().invoke(cli, ["up", "nameless.yaml", "-c", "ct", "-c", "ct2", "--dry-run"])
    assert table.exit_code == 2
    assert f"nameless@c.ct: {path}: not an up run record" in " ".join(table.stdout.split())
    assert "nameless@c.ct2: plan" in table.stdout


def test_help_teaches_wait() -> None:
    result = CliRunner().invoke(cli, ["up", "--help"])
    assert "--wait" in result.output and "--wait-timeout" in result.output
    assert "busy" in result.output


def test_a_busy_pair_fails_at_once_and_wait_timeout_waits_first(workdir: Path) -> None:
    from dflashops.up.lock import take_lock

    with take_lock(workdir / "up" / "nameless@c.ct"):  # another run holds the pair
        runner = CliRunner()
        at_once = runner.invoke(cli, ["up", "nameless.yaml", "-c", "ct", "--json"])
        assert at_once.exit_code == 1
        [pair] = json.loads(at_once.stdout)["pairs"]
        assert pair["error"].startswith("busy: up by pid ") and "--wait" in pair["error"]
        waited = runner.invoke(cli, ["up", "nameless.yaml", "-c", "ct", "--wait-timeout", "1"])
        assert waited.exit_code == 1
        assert "; waited 1 s" in " ".join(waited.stdout.split())
