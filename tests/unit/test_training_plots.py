"""The training loss curve: read from a train stage's metrics.jsonl, drawn by `report --loss`."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from dflashops.cli import cli
from dflashops.errors import DflashopsError
from dflashops.report.training_plots import LOSS_PNG, read_curve


def _metrics(path: Path, rows: Sequence[Mapping[str, object]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail, encoding="utf-8")
    return path


def test_a_torn_last_line_is_skipped_and_accuracies_kept(tmp_path: Path) -> None:
    rows = [{"step": s, "epoch": 0, "loss": 8.0 / s, "acc_0": s / 10} for s in range(1, 6)]
    curve = read_curve(_metrics(tmp_path / "metrics.jsonl", rows, tail='{"step": 6, "lo'))
    assert curve.steps == [1, 2, 3, 4, 5]
    assert curve.loss[0] == 8.0 and curve.loss[-1] == pytest.approx(1.6)
    assert [v for _, v in curve.accuracies["acc_0"]] == [0.1, 0.2, 0.3, 0.4, 0.5]


def test_metrics_without_loss_are_an_error_not_an_empty_plot(tmp_path: Path) -> None:
    with pytest.raises(DflashopsError, match="no loss values"):
        read_curve(_metrics(tmp_path / "metrics.jsonl", [{"step": 1, "lr": 0.1}]))


def test_report_loss_writes_the_png(tmp_path: Path) -> None:
    metrics = _metrics(
        tmp_path / "metrics.jsonl", [{"step": s, "loss": 5.0 - s / 10} for s in range(20)]
    )
    runner = CliRunner()
    result = runner.invoke(cli, ["report", "--loss", str(metrics), "--plots", str(tmp_path)])
    assert result.exit_code == 0, result.output
    png = tmp_path / LOSS_PNG
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {png}" in result.output.replace("\n", "")

    alone = runner.invoke(cli, ["report", "--loss", str(metrics)])
    assert alone.exit_code == 2 and "--plots" in alone.output
