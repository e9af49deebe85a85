"""What ``lab demo`` prints: its stages, the incident's acceptance side by side, where it runs."""

from __future__ import annotations

from collections.abc import Iterator

from rich.console import RenderableType
from rich.table import Table

from dflashops.cli.cells import number, numbers
from dflashops.lab.demo import DemoReport

# the three servers of the replay, in order, with what each one was
COLUMNS = (
    ("guessed", "guessed config (--force)"),
    ("corrected", "after drafter push"),
    ("tuned", "tuned k*"),
)


def demo_renderables(report: DemoReport) -> Iterator[RenderableType]:
    """The step table, the acceptance table and the closing lines, in print order."""
    stages = Table(title="dflashops lab demo (setup, then `up` on lab-ct1 and lab-ct2)")
    for column in ("run", "container", "step", "result", "seconds"):
        stages.add_column(column, justify="right" if column == "seconds" else "left")
    for row in report.stages:
        stages.add_row(
            row["run"], row["container"], row["step"], row["result"], f"{row['seconds']:.1f}"
        )
    yield stages
    yield acceptance_table(report)
    if report.refused_keys:
        yield f"the drafter check refused the guessed config on: {', '.join(report.refused_keys)}"
    if report.pushed_keys:
        yield f"up --fix-drafter pushed (as drafter push): {', '.join(report.pushed_keys)}"
    if report.second_pair:
        yield (
            "lab-ct2 stopped before its launch, on purpose (one vLLM server at a time on this "
            f"machine): {report.second_pair}"
        )
    yield f"server: {report.endpoint} (model {report.model!r})"
    yield f"first reply: {report.first_reply!r}"
    if report.tune:
        yield f"tuned playbook: {report.playbook} (k*={report.tune.get('best_k')})"
    yield f"run folder: {report.run_folder} (summary.md, plots/, record.json)"
    yield (
        f"continue by hand: DFLASHOPS_UP_STATE={report.up_state} "
        f"dflashops -i {report.inventory} up {report.playbook_file} -c lab-ct1 -c lab-ct2"
    )


def acceptance_table(report: DemoReport) -> Table:
    """Acceptance length, per-position acceptance and tok/s of the three servers."""
    table = Table(title="the incident, measured (bench, temperature 0)")
    table.add_column("")
    for _key, title in COLUMNS:
        table.add_column(title, justify="right")
    measured = [report.acceptance.get(key, {}) for key, _ in COLUMNS]
    table.add_row("k", *(str(m.get("k", "-")) for m in measured))
    table.add_row(
        "acceptance length", *(number(m.get("spec_decode_acceptance_length")) for m in measured)
    )
    table.add_row("per position", *(numbers(m.get("per_position_acceptance")) for m in measured))
    table.add_row("output tok/s", *(number(m.get("output_throughput"), 1) for m in measured))
    return table
