"""Issue 10 end to end on the lab: `tune lab-ct1` launches real vLLM with the decaying draft model
at the k the planner picks, benches each, verifies k* and writes it into a playbook copy."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dflashops.bench.models import BenchReport
from dflashops.inventory.load import load_inventory
from dflashops.playbook.load import load_playbook
from dflashops.proxmox.apply import provision
from tests.support.lab import isolated_lab_env, require_lab, run_cli
from tests.support.vllm_servers import runtime_or_skip
from tests.support.vllm_slot import VllmSlot

pytestmark = [pytest.mark.root, pytest.mark.vllm, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
BUDGET = 3


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    require_lab()
    runtime_or_skip()
    env = isolated_lab_env(tmp_path_factory.mktemp("tunelab"), tag="k", cidr="10.200.14.0/24")
    run_cli(env, "lab", "down", check=False)
    with VllmSlot():
        status = json.loads(run_cli(env, "lab", "up", "--json").stdout)
        try:
            inventory_path = Path(status["inventory"])
            inventory = load_inventory(inventory_path)
            report = provision(inventory, ["lab-ct1"])
            assert report.ok, report.failures
            yield env, inventory_path
        finally:
            run_cli(env, "lab", "down", check=False, timeout=180)


def test_live_tune_writes_a_verified_k(
    lab: tuple[dict[str, str], Path],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    env, inventory_path = lab
    book = tmp_path / "lab-decay.yaml"
    original = (REPO / "playbooks" / "lab-decay.yaml").read_text(encoding="utf-8")
    book.write_text(original, encoding="utf-8")
    out = tmp_path / "tune.json"
    done = run_cli(
        env,
        "-i",
        str(inventory_path),
        "tune",
        "lab-ct1",
        "-p",
        str(book),
        "--k-min",
        "1",
        "--k-max",
        "6",
        "--budget",
        str(BUDGET),
        "-n",
        "2",
        "--out",
        str(out),
        "--json",
        timeout=480,
    )
    summary = json.loads(done.stdout)
    record_property("tune", summary)
    print(f"live tune: {json.dumps(summary)}")
    best = summary["best_k"]
    assert 1 <= best <= 6
    launches = summary["launches"]
    assert 2 <= len(launches) <= BUDGET + 1
    assert launches[0] == 4  # the playbook's k first
    assert launches[-1] == best  # the server is left running k*
    assert summary["predicted_tok_s"] > 0 and summary["measured_tok_s"] > 0

    # k* is in the copy, its comment and the rest of the file untouched
    written = book.read_text(encoding="utf-8")
    assert re.search(rf"^  num_speculative_tokens: {best}$", written, re.M)
    assert re.sub(r"num_speculative_tokens: \d+", "K", written) == re.sub(
        r"num_speculative_tokens: \d+", "K", original
    )
    assert summary["written"] == (best != 4)

    report = BenchReport.load(out)
    assert report.tune is not None
    assert report.tune["best_k"] == best
    assert report.tune["predicted_tok_s"] > 0 and report.tune["measured_tok_s"] > 0
    assert report.config.num_speculative_tokens == best
    level = report.level(1)
    assert level is not None and level.completed == 2
    # the decaying draft: acceptance falls with position in the merged curve
    rates = report.tune["result"]["acceptance"]["rates"]
    assert rates[0] > rates[-1]
    # a CPU server: the roofline was considered, and the report says why there is none
    assert report.roofline is None
    assert any(note.startswith("no roofline: the server runs on cpu") for note in report.notes)


def test_live_compare_benches_each_method(lab: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    env, inventory_path = lab
    book = tmp_path / "lab-decay.yaml"
    book.write_text((REPO / "playbooks" / "lab-decay.yaml").read_text(encoding="utf-8"))
    out = tmp_path / "compare.json"
    methods = "none,ngram,draft_model,dflash"
    args = ["-i", str(inventory_path), "compare", "lab-ct1", "-p", str(book), "-n", "2"]
    done = run_cli(env, *args, "--methods", methods, "--out", str(out), "--json", timeout=480)
    summary = json.loads(done.stdout)
    rows = {row["method"]: row for row in summary["rows"]}
    assert list(rows) == ["none", "ngram", "draft_model"]
    (skipped,) = summary["skipped"]
    assert skipped["method"] == "dflash" and "drafter" in skipped["reason"]
    for row in rows.values():
        assert row["output_tok_s"] > 0 and row["completed"] == 2 and row["failed"] == 0
    assert rows["none"]["acceptance_length"] is None and rows["none"]["k"] is None
    decay = rows["draft_model"]
    assert decay["k"] == 4 and decay["acceptance_length"] > 1.0
    assert decay["per_position_acceptance"][0] > decay["per_position_acceptance"][-1]
    # n-gram runs at the playbook's k; on this workload it may find no repeated n-gram to propose
    assert rows["ngram"]["k"] == 4

    report = BenchReport.load(out)
    assert report.compare is not None and report.compare["rows"] == summary["rows"]
    plots = json.loads(
        run_cli(env, "report", str(out), "--plots", str(tmp_path / "plots"), "--json").stdout
    )["plots"]
    assert str(tmp_path / "plots" / "compare_methods.png") in plots


def test_load_tune_serves_a_schedule_or_says_why_not(
    lab: tuple[dict[str, str], Path],
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    """Issue 34 on the lab (CPU, noisy: the mechanics, not the speed): levels 1 and 16, two
    launches of one k, the decision, the schedule launched and verified when there is one, the
    tuned playbook valid and the server left on what it says. (At levels 1 and 4 the lab's
    DFlash drafter wins at both, so no schedule is rendered; at 16 speculation off wins, and on
    2026-12-04 the served schedule was refused: 1347.7 against 3242.9 tok/s at c=16.)"""
    env, inventory_path = lab
    book = tmp_path / "lab-dflash.yaml"
    book.write_text((REPO / "playbooks" / "lab-dflash.yaml").read_text(encoding="utf-8"))
    out = tmp_path / "tune-load.json"
    args = ["-i", str(inventory_path), "tune", "lab-ct1", "-p", str(book), "--load", "1,16"]
    done = run_cli(env, *args, "--budget", "2", "--out", str(out), "--json", timeout=540)
    summary = json.loads(done.stdout)
    record_property("tune_load", summary)
    print(f"load tune: {json.dumps(summary)}")
    assert summary["mode"] == "load" and set(summary["k_by_level"]) == {"1", "16"}
    launches = summary["launches"]
    assert launches[:2] == [4, 0]  # the playbook's k, then speculation off
    kept = summary["kept_schedule"] or summary["kept_k"] or 4
    assert launches[-1] == kept, "the server is left on what the playbook now says"
    if summary["decision"] == "schedule":
        assert summary["verdict"] is not None
        assert any(isinstance(served, list) for served in launches)
        levels = {row["level"] for row in summary["verdict"]["levels"]}
        assert levels == {1, 16}
    else:
        assert summary["verdict"] is None and summary["kept_schedule"] is None

    tuned = load_playbook(book)
    assert tuned.server.num_speculative_tokens == (summary["kept_k"] or 4)
    schedule = tuned.server.speculative_schedule
    written = [list(entry) for entry in schedule] if schedule else None
    assert written == summary["kept_schedule"]
    assert "# tune --load " in book.read_text(encoding="utf-8")

    report = BenchReport.load(out)
    assert report.tune is not None and report.tune["load"]["levels"] == [1, 16]
    plots = json.loads(
        run_cli(env, "report", str(out), "--plots", str(tmp_path / "plots"), "--json").stdout
    )["plots"]
    assert any("load" in Path(plot).name for plot in plots), plots


def test_a_hand_written_schedule_is_served_by_the_real_engine(
    lab: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    """Whatever the noisy CPU lets the load tune decide, vLLM 0.32 itself takes a schedule as
    dflashops renders it (k = 0 in a range included) and serves at both sides of the switch."""
    env, inventory_path = lab
    book = tmp_path / "lab-dflash.yaml"
    book.write_text((REPO / "playbooks" / "lab-dflash.yaml").read_text(encoding="utf-8"))
    common = ["-i", str(inventory_path)]
    schedule = "server.speculative_schedule=[[1, 1, 4], [2, 256, 0]]"
    run_cli(env, *common, "launch", "lab-ct1", "-p", str(book), "--set", schedule, timeout=400)
    status = json.loads(run_cli(env, *common, "status", "lab-ct1", "--json").stdout)
    assert "num_speculative_tokens_per_batch_size" in json.dumps(status), status
    out = tmp_path / "bench.json"
    bench = ["bench", "lab-ct1", "-p", str(book), "-c", "1,4", "-n", "4", "--out", str(out)]
    run_cli(env, *common, *bench, timeout=300)
    report = BenchReport.load(out)
    for level in (1, 4):
        measured = report.level(level)
        assert measured is not None and measured.completed == 4 and measured.failed == 0
