"""``dflashops doctor``: why a server is slow or accepts little, ranked, with the fixes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from dflashops.cli.context import AppContext, dump_json
from dflashops.cli.options import FiniteFloatRange, playbook_option, skip_pve_check_option

if TYPE_CHECKING:
    from dflashops.doctor.findings import DoctorReport

pass_app = click.make_pass_decorator(AppContext)


@click.command("doctor", short_help="Why a server is slow or accepts little: ranked findings.")
@click.argument("name")
@playbook_option
@click.option(
    "--window",
    "window_s",
    type=FiniteFloatRange(min=1, max=600),
    default=10.0,
    show_default=True,
    help="Seconds between the two /metrics scrapes on a busy server.",
)
@click.option(
    "--probe/--no-probe",
    default=None,
    help="Send a short probe workload (3 requests of the playbook's workload at concurrency 1) "
    "always / never. Default: only when the server is idle.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
@skip_pve_check_option
@pass_app
@click.pass_context
def doctor(
    ctx: click.Context,
    app: AppContext,
    *,
    name: str,
    playbook_name: str | None,
    window_s: float,
    probe: bool | None,
    as_json: bool,
) -> None:
    """Examine the server in container NAME and explain what makes it slow or accept little,
    from what can be measured: its /metrics (two scrapes, or a short probe when idle), its log,
    deployed.json, the drafter files it loads, and nvidia-smi on a GPU host.

    \b
    Rules (each finding: severity, evidence, the command that fixes it):
      drafter-config  position-0 acceptance far below the registry entry's (or the
                      method's), with the config diffed key by key against the reference
      thinking-mode   the workload's enable_thinking vs what the drafter was trained on
      engine          an engine version that ignores a key the drafter relies on, a runner
                      or attention backend known to break DFlash
      tune            acceptance collapsing before k: tune's predicted gain, with numbers
      roofline        GPU: single-stream decode far below bandwidth roofline x acceptance
      gpu, p2p, eager GPU causes, each checked: power limit, throttling, PCIe, clocks under
                      load, P2P under TP, --enforce-eager
      kv-cache        KV cache full, preemptions
      prefix-cache    prefix caching off
      server          no process, or running arguments that differ from deployed.json

    \b
    Exit codes: 0 nothing wrong (notes only), 1 findings, 2 bad input."""
    from dflashops.cli.progress import spinner
    from dflashops.doctor.core import DoctorRequest
    from dflashops.doctor.core import doctor as run_doctor

    request = DoctorRequest(container=name, playbook=playbook_name, window_s=window_s, probe=probe)
    inventory = app.inventory()
    with spinner(f"doctor {name}", enabled=not as_json) as say:
        report = run_doctor(inventory, request, say=say)
    if as_json:
        click.echo(dump_json({**report.model_dump(mode="json"), "exit_code": report.exit_code}))
    else:
        _show(report)
    ctx.exit(report.exit_code)


def _show(report: DoctorReport) -> None:
    from rich.table import Table

    from dflashops.cli.console import make_console

    console = make_console()
    m = report.measured
    head = [f"{report.container}:"]
    if not m.get("running"):
        head.append("no server running")
    else:
        head.append(f"{m.get('engine') or 'engine ?'}, {m.get('method') or 'no speculation'}")
        if m.get("k"):
            head.append(f"k={m['k']}")
        if m.get("acceptance_length"):
            rates = ", ".join(f"{r:.2f}" for r in m.get("per_position_acceptance") or [])
            head.append(f"acceptance length {m['acceptance_length']:.2f} [{rates}]")
        if m.get("decode_tok_s"):
            head.append(f"{m['decode_tok_s']:.1f} tok/s single-stream")
    console.print(" ".join(head))
    if m.get("acceptance_source"):
        console.print(f"measured: {m['acceptance_source']}, {m.get('num_drafts')} drafts")
    if report.findings:
        table = Table(title=f"{len(report.findings)} finding(s), most important first")
        for column in ("#", "severity", "finding", "evidence", "fix"):
            table.add_column(column, justify="right" if column == "#" else "left")
        for rank, finding in enumerate(report.findings, 1):
            style = {"critical": "bold red", "warning": "yellow"}.get(finding.severity, "")
            table.add_row(
                str(rank),
                f"[{style}]{finding.severity}[/]" if style else finding.severity,
                f"{finding.title} ({finding.rule})",
                "\n".join(finding.evidence),
                finding.fix,
            )
        console.print(table)
    else:
        console.print("no findings: nothing measured is wrong")
    ok = [c.rule for c in report.checks if c.outcome == "ok"]
    skipped = [c for c in report.checks if c.outcome == "skipped"]
    if ok:
        console.print(f"checked, fine: {', '.join(ok)}")
    for check in skipped:
        console.print(f"not checked: {check.rule}: {check.note}", style="dim")
    for note in report.notes:
        console.print(f"note: {note}", style="dim")
