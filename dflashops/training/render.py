"""Human output of ``drafter train``: the plan and the outcome as rich tables (the CLI draws the
loss curve with ``report.training_plots``). Imported by the CLI only when it prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from dflashops.training.evaluate import DrafterScore, Evaluation
from dflashops.training.outcome import TrainOutcome
from dflashops.training.plan import TrainPlan, human_bytes


def plan_renderables(plan: TrainPlan, *, dry_run: bool) -> list[RenderableType]:
    """Stages, drafter shape with sources, sizes, files, the server's steps, the estimate."""
    head = Text()
    head.append(f"drafter train {plan.container}", style="bold")
    head.append(f": run {plan.run} in {plan.folder}")
    if dry_run:
        head.append(" (dry run: nothing was changed)", style="yellow")
    stages = Table(title="Stages")
    for name in ("stage", "status", "what", "est."):
        stages.add_column(name)
    for stage in plan.stages:
        estimate = "-" if stage.status == "done" else _duration(stage.estimate_s)
        stages.add_row(stage.stage, stage.status, stage.detail, estimate)
    shape = Table(title="Drafter")
    for name in ("key", "value", "from"):
        shape.add_column(name)
    for key, value, source in plan.shape.rows():
        shape.add_row(key, json.dumps(value), source)
    sizes = plan.sizes
    dataset = plan.dataset
    lines: list[RenderableType] = [
        head,
        stages,
        shape,
        Text(
            f"dataset: {dataset.path} ({dataset.source}; {dataset.lines} lines, "
            f"{human_bytes(dataset.bytes)}; {dataset.samples} samples used"
            + ("; pushed to the container" if plan.push_dataset else "")
            + ")"
        ),
        Text(
            f"sizes: ≤ {sizes['answer_tokens_max']} answer tokens, ≤ "
            f"{sizes['tokens_per_sample_max']} tokens per sample, hidden states ≈ "
            f"{human_bytes(sizes['hidden_state_bytes'])}, ~{sizes['train_steps']} train steps"
        ),
        _files(plan),
    ]
    lines += [Text(f"server: {step}") for step in plan.server]
    lines += [Text(f"note: {note}", style="yellow") for note in plan.notes]
    todo = plan.to_run
    lines.append(
        Text(
            f"estimated time: {_duration(plan.estimate_s)} for {', '.join(todo)} (rough)"
            if todo
            else "every stage is done: the export is checked again"
        )
    )
    return lines


def _files(plan: TrainPlan) -> Table:
    table = Table(title="Where files go")
    table.add_column("what")
    table.add_column("where", overflow="fold")  # a path folds on a narrow terminal, never cut
    for what, where in plan.files:
        table.add_row(what, where)
    return table


def outcome_renderables(outcome: TrainOutcome, loss_curve: Path | None) -> list[RenderableType]:
    """What ran, the check, the provenance, the evaluation and the promoted playbook."""
    plan = outcome.plan
    table = Table(title=f"drafter train {plan.container}: run {plan.run}")
    for name in ("stage", "result", "summary"):
        table.add_column(name)
    for stage in plan.stages:
        ran = stage.stage in outcome.ran
        summary = outcome.summaries.get(stage.stage)
        shown = _summary(summary) if summary else stage.detail
        table.add_row(stage.stage, "ran" if ran else "done earlier", shown)
    out: list[RenderableType] = [table]
    for line in outcome.server:
        out.append(Text(f"server: {line}"))
    check = outcome.check
    if check is not None:
        out.append(Text(f"export: {outcome.export} (drafter check: {check.status})"))
        for finding in check.findings:
            out.append(Text(f"  {finding}", style="dim"))
        if check.ref_conflicts:
            out.append(
                Text(
                    f"  differs from drafter.ref on: {', '.join(check.ref_conflicts)}", style="dim"
                )
            )
    if outcome.provenance:
        out.append(Text(f"provenance: {provenance_line(outcome.provenance)}"))
    for what, path in outcome.local_files.items():
        out.append(Text(f"{what}: {path}"))
    if loss_curve is not None:
        out.append(Text(f"loss curve: {loss_curve}"))
    if outcome.evaluation is not None:
        out.append(evaluation_table(outcome.evaluation))
    if outcome.promoted:
        out.append(Text(f"promoted playbook: {outcome.promoted} (launched)", style="green"))
    out.append(Text(f"took {_duration(outcome.seconds)}"))
    return out


PROVENANCE_KEYS = ("samples", "sha256", "thinking", "temperature", "steps", "final_loss")


def provenance_line(provenance: dict[str, Any]) -> str:
    """What the drafter was trained on, in one line: dataset, generation, training, versions."""
    flat: dict[str, Any] = {}

    def walk(data: dict[str, Any], prefix: str) -> None:
        for key, value in data.items():
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")
            else:
                flat[f"{prefix}{key}"] = value

    walk(provenance, "")
    parts = []
    for key, value in flat.items():
        name = key.rsplit(".", 1)[-1]
        if key.startswith("versions."):
            parts.append(f"{name} {value}")
        elif name in PROVENANCE_KEYS:
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            parts.append(f"{name} {shown[:12] if name == 'sha256' else shown}")
    return ", ".join(parts)


def evaluation_table(evaluation: Evaluation) -> Table:
    """tok/s and acceptance per position of the drafter replaced and the trained one."""
    scores = [s for s in (evaluation.before, evaluation.after) if s is not None]
    positions = max((len(s.per_position) for s in scores), default=0)
    table = Table(title="Evaluation (concurrency 1)")
    for name in ("drafter", "k", "tok/s", "accept. length"):
        table.add_column(name, justify="right" if name != "drafter" else "left")
    for index in range(positions):
        table.add_column(f"pos {index}", justify="right")
    for score in scores:
        table.add_row(*_score_cells(score, positions))
    if evaluation.gain is not None:
        table.caption = f"trained vs current: {evaluation.gain:+.0%} tok/s"
    return table


def _score_cells(score: DrafterScore, positions: int) -> list[str]:
    name = f"{score.label} ({score.drafter})" + (" [earlier bench]" if score.reused else "")
    rates = [f"{rate:.2f}" for rate in score.per_position]
    rates += ["-"] * (positions - len(rates))
    length = "-" if score.acceptance_length is None else f"{score.acceptance_length:.2f}"
    return [name, str(score.k), f"{score.tok_s:.1f}", length, *rates]


def _summary(summary: dict[str, Any]) -> str:
    scalars = [(k, v) for k, v in summary.items() if not isinstance(v, dict | list)]
    return ", ".join(f"{k} {v}" for k, v in scalars[:5])


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
