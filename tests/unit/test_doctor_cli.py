"""`dflashops doctor`'s command line: bad input is exit 2; the human table survives a pipe;
the registry's new optional fields (issue 21) load, and bad ones are refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.cli.console import PIPE_TABLE_WIDTH
from dflashops.cli.doctor import _show
from dflashops.doctor.core import report_from
from dflashops.doctor.facts import Acceptance, DoctorFacts, DrafterFacts
from dflashops.drafter.registry import load_registry, parse_entry
from dflashops.errors import DrafterError
from tests.support.manifests import deployed_manifest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
LAB_ENTRY = (
    Path(__file__).resolve().parents[2]
    / "dflashops/lab/registry/dflashops-lab--tiny-qwen3-dflash.json"
)


def test_bad_window_is_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["doctor", "ct", "--window", "0"])
    assert result.exit_code == 2 and "--window" in result.output


def test_unknown_inventory_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["-i", str(tmp_path / "none.yaml"), "doctor", "ct"])
    assert result.exit_code == 2


def test_the_ranked_table_keeps_keys_and_commands_whole_in_a_pipe(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    guessed = json.loads(
        (FIXTURES / "drafter/qwen36-27b-dflash-guessed/config.json").read_text(encoding="utf-8")
    )
    spec = {"method": "dflash", "model": "/srv/drafter", "num_speculative_tokens": 4}
    argv = ["py", "-m", "vllm", "serve", "/m", "--speculative-config", json.dumps(spec)]
    facts = DoctorFacts(
        container="gpu-ct7",
        manifest=deployed_manifest(spec={"argv": argv, "model": "/m"}),
        running_argv=argv,
        engine="vllm",
        engine_version="0.32.0",
        device="cpu",
        speculative_config=spec,
        entry=load_registry().find("z-lab/Qwen3.6-27B-DFlash"),
        drafter=DrafterFacts("/srv/drafter", guessed),
        acceptance=Acceptance(4, (0.02, 0.0, 0.0, 0.0), 1.02, 500, "doctor probe"),
    )
    report = report_from(facts)
    assert report.exit_code == 1
    _show(report)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert (
        lines[0]
        == "gpu-ct7: vllm==0.32.0, dflash k=4 acceptance length 1.02 [0.02, 0.00, 0.00, 0.00]"
    )
    # a pipe lays the table out to 120 columns: its cells wrap at spaces, never inside a word
    rows = [line.split("│")[1:-1] for line in lines if line.startswith("│")]
    assert rows[0][1].strip() == "critical" and "drafter config mismatch" in rows[0][2]
    fix = " ".join(row[4].strip() for row in rows if row[4].strip())
    assert fix == "dflashops drafter push gpu-ct7 && dflashops launch gpu-ct7"
    evidence = " ".join(row[3].strip() for row in rows)
    assert "dflash_config.target_layer_ids: [2, 17, 32, 47, 62]" in evidence
    assert all(len(line) <= PIPE_TABLE_WIDTH for line in lines if line[:1] in "┏┃┡│└")
    assert "not checked: roofline: the server runs on cpu: no GPU roofline" in out


def _entry() -> dict[str, Any]:
    data = json.loads(LAB_ENTRY.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_registry_expected_acceptance_and_trained_for_load() -> None:
    entry = parse_entry(_entry(), "lab")
    assert entry.trained_for is not None and entry.trained_for.thinking is False
    smoke = entry.expected_acceptance[1]
    assert (smoke.k, smoke.acceptance_length, smoke.per_position[0]) == (4, 2.63, 0.61)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["expected_acceptance"][0].update(per_position=[1.2]), "per_position"),
        (lambda d: d["expected_acceptance"][0].update(sources=[]), "name at least one source"),
        (lambda d: d["expected_acceptance"][0].update(sources=["nowhere"]), "unknown source"),
        (lambda d: d["expected_acceptance"][0].update(acceptance_length=9.0), "within [1, k + 1]"),
        (lambda d: d["expected_acceptance"][0].update(basis="vibes"), "basis"),
        (lambda d: d["trained_for"].update(thinking="no"), "true or false"),
        (lambda d: d["trained_for"].update(extra=1), "unknown field 'extra'"),
    ],
)
def test_registry_fields_are_checked(change: Any, message: str) -> None:
    data = copy.deepcopy(_entry())
    change(data)
    with pytest.raises(DrafterError, match=message.replace("[", r"\[").replace("+", r"\+")):
        parse_entry(data, "lab")


def test_length_alone_bounds_position_zero_from_below() -> None:
    entry = load_registry().find("z-lab/Qwen3-8B-DFlash-b16")
    assert entry is not None
    # AL 2.93 at k=8: rates never rise with position, so r0 >= 1.93 / 8
    assert entry.expected_acceptance[0].position0_floor == pytest.approx(1.93 / 8)


def test_drafter_train_writes_fields_the_registry_accepts(tmp_path: Path) -> None:
    from dflashops.training.evaluate import DrafterScore, Evaluation
    from dflashops.training.registry_fields import registry_fields, write_registry_fields

    provenance = {
        "job": "lab-dflash",
        "created": "2026-12-03T22:38:29+00:00",
        "generation": {"thinking": False, "temperature": 0.0},
    }
    after = DrafterScore(
        "trained", "/srv/export", 4, 558.0, 2.63, (0.61, 0.43, 0.35, 0.24), "/runs/bench-after.json"
    )
    fields = registry_fields(
        provenance,
        Evaluation(before=None, after=after),
        provenance_file="/runs/provenance.json",
        workload="smoke",
        engine="vllm==0.32.0",
        temperature=0.0,
    )
    written = write_registry_fields(tmp_path, fields)
    assert written == str(tmp_path / "registry-fields.json")
    data = _entry()
    data["sources"].update(fields["sources"])
    data["trained_for"] = fields["trained_for"]
    data["expected_acceptance"] = fields["expected_acceptance"]
    entry = parse_entry(data, "trained")
    assert entry.trained_for is not None and entry.trained_for.sources == ("train-provenance",)
    assert entry.expected_acceptance[0].per_position == (0.61, 0.43, 0.35, 0.24)
    assert entry.sources["train-evaluation"].startswith("/runs/bench-after.json — ")
    # thinking left to the template's default says nothing: no trained_for, nothing written
    silent = registry_fields(
        {"generation": {"thinking": None}},
        None,
        provenance_file="p",
        workload="smoke",
        engine="vllm==0.32.0",
    )
    assert "trained_for" not in silent and write_registry_fields(tmp_path / "x", silent) is None
