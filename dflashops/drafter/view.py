"""Rich rendering of drafter reports (kept out of the stdlib-only core)."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dflashops.drafter.report import DrafterCheckReport, DrafterDiffReport

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}
STATUS_STYLE = {"errors": "bold red", "warnings": "yellow", "clean": "green"}


def check_view(report: DrafterCheckReport) -> Group:
    """Header lines, one row per finding, the summary and what launch must set."""
    head = [f"drafter  {report.drafter}  ({report.drafter_path or 'in memory'})"]
    if report.target:
        head.append(f"target   {report.target}  ({report.target_path})")
    if report.ref:
        head.append(f"ref      {report.ref}  (matched by {report.ref_detail})")
    else:
        head.append("ref      none matched (pass --ref NAME to compare with a reference)")
    if report.engine:
        head.append(f"engine   {report.engine}")
    if report.fingerprint:
        head.append(f"weights  {report.fingerprint}")
    # one Text a line: a long word (the weights' sha256) then widens only its own line
    parts: list[Text | Table] = [Text(line) for line in head]
    if report.findings:
        # two columns: the "why" is the point of a finding and wraps at spaces to fit the width;
        # the key, expected and found lines are single words to the console, which never breaks
        # a word (dflashops.cli.console)
        table = Table(show_lines=True)
        table.add_column("severity", no_wrap=True)
        table.add_column("finding")
        for f in report.findings:
            body = Text()
            body.append(f.key, style="bold")
            body.append(f"\nexpected  {f.expected}\nfound     {f.found}\n")
            body.append(f.why, style="dim")
            table.add_row(Text(f.severity, style=SEVERITY_STYLE[f.severity]), body)
        parts.append(table)
    status = report.summary.status
    line = Text(f"{status}: {report.summary.line()} (exit {report.exit_code})")
    line.stylize(STATUS_STYLE[status], 0, len(status))
    parts.append(line)
    if report.required_env:
        env = " ".join(f"{k}={v}" for k, v in report.required_env.items())
        parts.append(Text(f"required env: {env}", style="bold"))
    return Group(*parts)


def diff_view(report: DrafterDiffReport) -> Group | Text:
    title = f"{report.drafter} vs {report.against} ({report.against_kind})"
    if not report.differences:
        return Text(f"{title}: no differences")
    registry = report.against_kind == "registry"
    table = Table(title=title)
    # a dotted key is one identifier: never wrapped; values wrap only at their spaces
    table.add_column("key", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("drafter")
    table.add_column("reference" if registry else "other")
    if registry:
        table.add_column("certainty")
    for d in report.differences:
        row = [d.key, d.status, d.drafter, d.other]
        sure = f"{'certain' if d.certain else 'uncertain'}\n{d.basis}"
        table.add_row(*row, *([sure] if registry else []))
    return Group(table, Text(f"{len(report.differences)} differing key(s)"))
