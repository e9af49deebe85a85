"""The PNG of a drafter training run: its loss (and any per-position accuracy) by step.

Reads the run's ``metrics.jsonl`` (one JSON object per logged step, ``{"step", "loss", ...}``,
written by the train stage). A line cut short by an interrupted run is skipped, as the stage
itself skips it when it resumes; a file with no loss at all is an error, not an empty plot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from dflashops.errors import DflashopsError
from dflashops.report.figure import save_figure, use_file_backend

LOSS_PNG = "training_loss.png"


@dataclass(frozen=True)
class TrainingCurve:
    """Loss by step, and every other numeric series whose name says it is an accuracy."""

    steps: list[int]
    loss: list[float]
    accuracies: dict[str, list[tuple[int, float]]]


def read_curve(path: Path) -> TrainingCurve:
    """The loss curve in ``path`` (a train stage's ``metrics.jsonl``)."""
    steps: list[int] = []
    loss: list[float] = []
    accuracies: dict[str, list[tuple[int, float]]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DflashopsError(f"cannot read {path}: {exc.strerror or exc}") from exc
    for line in lines:
        try:
            row = json.loads(line)
            step = int(row["step"])
        except (ValueError, KeyError, TypeError):
            continue  # blank, torn by an interruption, or not a step line
        if isinstance(row.get("loss"), int | float):
            steps.append(step)
            loss.append(float(row["loss"]))
        for key, value in row.items():
            if "acc" in key.lower() and isinstance(value, int | float):
                accuracies.setdefault(key, []).append((step, float(value)))
    if not loss:
        raise DflashopsError(
            f"{path} holds no loss values",
            hint="pass the metrics.jsonl of a drafter train run (its train stage writes it)",
        )
    return TrainingCurve(steps=steps, loss=loss, accuracies=accuracies)


def write_loss_curve(metrics: Path, out_dir: Path, *, title: str | None = None) -> Path:
    """Write ``training_loss.png`` into ``out_dir``: loss by step, accuracies on a second axis."""
    curve = read_curve(metrics)
    use_file_backend()
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(curve.steps, curve.loss, color="tab:blue", label="loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss")
    ax.set_title(title or f"drafter training: {metrics.parent.name}")
    shown = _accuracies_to_show(curve.accuracies)
    if shown:
        acc_ax = ax.twinx()
        for name, points in sorted(shown.items()):
            acc_ax.plot([s for s, _ in points], [v for _, v in points], linestyle="--", label=name)
        acc_ax.set_ylabel("accuracy")
        acc_ax.set_ylim(0, 1)
        acc_ax.legend(loc="lower right", fontsize="x-small", framealpha=0.9)
    ax.legend(loc="upper right")
    return save_figure(fig, out_dir / LOSS_PNG)


def _accuracies_to_show(
    accuracies: dict[str, list[tuple[int, float]]],
) -> dict[str, list[tuple[int, float]]]:
    """The held-out accuracies when the run logged them (per-step training ones are noisy and
    would bury them), else the training ones."""
    held_out = {name: points for name, points in accuracies.items() if name.startswith("val_")}
    return held_out or accuracies
