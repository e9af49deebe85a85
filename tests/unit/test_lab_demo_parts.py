"""The demo's own decisions, without a lab: how it stages the incident playbook, reads the
refused keys and renders the three measured servers."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from dflashops.cli.lab_demo_view import acceptance_table
from dflashops.lab.demo import DemoReport, _finding_keys
from dflashops.lab.errors import LabError
from dflashops.lab.incident import STAGED_PATH, TRAINED_PATH, TUNE_BUDGET, incident_playbook
from dflashops.playbook.load import load_playbook, resolve_playbook_path


def test_the_incident_playbook_points_at_the_staged_copy(tmp_path: Path) -> None:
    bundled = resolve_playbook_path("lab-dflash")
    out = incident_playbook(bundled, tmp_path / "lab-dflash.incident.yaml")
    book = load_playbook(out)
    assert book.drafter.model is not None
    assert str(book.drafter.model.path) == STAGED_PATH
    assert TRAINED_PATH not in out.read_text()
    assert book.tune.budget == TUNE_BUDGET  # the demo's tune spends fewer launches
    assert bundled.read_text().count(TRAINED_PATH) == 1  # the bundled playbook is untouched


def test_an_incident_playbook_needs_exactly_one_drafter_path(tmp_path: Path) -> None:
    odd = tmp_path / "odd.yaml"
    odd.write_text("version: 1\n")
    with pytest.raises(LabError, match="expected one"):
        incident_playbook(odd, tmp_path / "out.yaml")


def test_refused_keys_are_read_from_error_findings() -> None:
    findings = [
        "warning: tie_word_embeddings: expected false, found true",
        "error: transformer_layer_config.layer_types: expected [...], found [...]",
        "error: mask_token_id: expected 3, found 7",
    ]
    assert _finding_keys(findings) == ["transformer_layer_config.layer_types", "mask_token_id"]


def test_the_acceptance_table_shows_three_servers_side_by_side() -> None:
    report = DemoReport(
        acceptance={
            "guessed": {"k": 4, "spec_decode_acceptance_length": 1.01, "output_throughput": 20.0},
            "corrected": {
                "k": 4,
                "spec_decode_acceptance_length": 2.6,
                "per_position_acceptance": [0.8, 0.5, 0.2, 0.1],
                "output_throughput": 41.5,
            },
        }
    )
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(acceptance_table(report))
    text = out.getvalue()
    assert "1.01" in text and "2.60" in text and "0.80 0.50 0.20 0.10" in text
    assert "41.5" in text
    assert "tuned k*" in text  # the third column is there even before tune ran
