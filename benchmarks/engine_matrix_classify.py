"""What happened in one cell, from its steps' recorded outputs (pure).

Outcomes:

- ``works``: the server served the bench (acceptance length from the server's spec-decode
  counters, else its log; output tok/s at concurrency 1);
- ``refused``: dflashops refused before the engine ran (``launch --dry-run`` or ``launch``
  exits with its own one-line error, or the bundled server's preflight stopped it);
- ``engine-failure``: the engine itself failed (its own error line, from the server log);
- ``known-engine-bug``: ``doctor``'s engine rule names a vLLM issue for this server;
- ``not-run``: the matrix could not run the cell (the runtime would not install, the lab or the
  container could not be reached); such a cell runs again on the next run.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

FINAL = frozenset({"works", "refused", "engine-failure", "known-engine-bug"})
# messages that are the lab or the connection failing, not dflashops refusing the playbook
HARNESS = re.compile(
    r"\bssh\b|connection (refused|reset)|timed out|unreachable|no route|busy: |PVE API|"
    r"cannot connect|name or service not known|lab is not running",
    re.IGNORECASE,
)
_ERROR = re.compile(r"\b([A-Za-z_][\w.]*(Error|Exception)|Killed|Segmentation fault)\b")
# wrapper lines that say an engine failed, not why
_GENERIC = re.compile(
    r"Engine core initialization failed|See root cause above|EngineDeadError|Worker failed with|"
    r"died unexpectedly|Traceback|APIServer|raise |^\s*File \"",
    re.IGNORECASE,
)
_PREFIX = re.compile(
    r"^(\(\w+(?: pid=\d+)?\)\s+)?"
    r"((INFO|WARNING|ERROR|CRITICAL|DEBUG)\s+\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?\s+\[[^\]]*\]\s*)?"
)
_QUIET = re.compile(r"^(\(\w+(?: pid=\d+)?\)\s+)?(INFO|WARNING|DEBUG)\s+\d\d-\d\d ")
_ISSUE = re.compile(r"(?:github\.com/vllm-project/vllm/(?:issues|pull)/|vllm#)(\d+)")
_NEEDS = re.compile(
    r"\b(?:needs|requires|first|speculative decoding from)\b[^0-9]{0,40}?(\d+\.\d+\.\d+)",
    re.IGNORECASE,
)
_EXPECTED = re.compile(r"\bengine\.(\w+): expected \w+>=(\d+\.\d+\.\d+)")
_WHERE = re.compile(r"^\S+\.ya?ml:\d+: ")
# a trained drafter whose acceptance length stays below this drafted next to nothing
NEAR_ZERO_AL = 1.05
TRAINED = frozenset({"draft_model", "dflash"})


# what launch.sh writes at every server start (templates/launch.sh.j2)
_START = re.compile(r"^dflashops: launch\.sh pid \d+ at (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ):", re.M)
CLOCK_SLACK = timedelta(seconds=5)


def cell_log(full: str, since: datetime) -> str:
    """The part of the container's server log written by this cell's servers: the log keeps
    every start, so it begins at the first ``launch.sh`` line stamped at or after ``since``
    (UTC, aware); empty when no server started."""
    for match in _START.finditer(full):
        stamp = datetime.strptime(match.group(1), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=since.tzinfo)
        if stamp >= since - CLOCK_SLACK:
            return full[match.start() :]
    return ""


@dataclass
class Verdict:
    outcome: str
    text: str  # the table cell
    message: str = ""  # the line behind it (refusal, engine error, bug title)
    acceptance_length: float | None = None
    output_tok_s: float | None = None
    known_bug: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def error_line(step: dict[str, Any]) -> str:
    """The product's own one-line error (``error: …`` on stderr), else what the matrix saw
    (a timeout), else stderr's last line."""
    lines = [str(line).strip() for line in step.get("stderr_tail") or [] if str(line).strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line.removeprefix("error: ")
    if step.get("error"):
        return str(step["error"])
    return lines[-1] if lines else f"exit {step.get('rc')}"


def harness_problem(step: dict[str, Any], message: str) -> bool:
    """The lab, the connection or the matrix's own command line failed, not the playbook:
    a timeout, an unreachable container, Click's usage error."""
    usage = any(str(line).startswith("Usage:") for line in step.get("stderr_tail") or [])
    return usage or step.get("rc") == 124 or bool(HARNESS.search(message))


def strip_log_prefix(line: str) -> str:
    return _PREFIX.sub("", line.strip(), count=1).strip()


def engine_error(log_text: str) -> str | None:
    """The engine's own error line: the first exception line that says why (vLLM's wrappers,
    'Worker failed with error …', 'Engine core initialization failed. See root cause above',
    are skipped when a cause is there; what fails after the cause, while the processes shut
    down, is not the reason), without vLLM's process and logging prefix. Lines vLLM logs at
    INFO or WARNING (an optional import that failed at start-up) are not errors."""
    found = []
    for raw in log_text.splitlines():
        if _QUIET.match(raw.strip()):
            continue
        line = strip_log_prefix(raw)
        if line and _ERROR.search(line) and not line.startswith("dflashops-server: preflight ok"):
            found.append(line)
    specific = [line for line in found if not _GENERIC.search(line)]
    pick = specific or found
    return pick[0] if pick else None


def short_engine(line: str) -> str:
    """``vllm.x.SomeError: why`` → ``SomeError: why``."""
    return re.sub(r"^[\w.]+\.(\w+(Error|Exception))", r"\1", line)


def refused_text(message: str) -> str:
    message = _WHERE.sub("", message, count=1)  # the playbook's path and line, when it leads
    key = _EXPECTED.search(message)  # the drafter check's engine finding
    if key:
        return f"refused: {key.group(1)} needs {key.group(2)}"
    needs = _NEEDS.search(message)
    return f"refused: needs {needs.group(1)}" if needs else "refused: " + shorten(message, 36)


def known_bugs(doctor: dict[str, Any] | None) -> list[tuple[str, str]]:
    """(``vllm#N``, finding title) for each engine finding of doctor that cites a vLLM issue."""
    found = []
    for finding in (doctor or {}).get("findings") or []:
        if finding.get("rule") != "engine":
            continue
        text = " ".join([finding.get("title") or "", *(finding.get("evidence") or [])])
        for number in dict.fromkeys(_ISSUE.findall(text)):
            found.append((f"vllm#{number}", str(finding.get("title") or "")))
    return found


def doctor_rules(doctor: dict[str, Any] | None, rules: tuple[str, ...]) -> dict[str, Any]:
    """The outcome and findings of ``rules`` in a ``doctor --json`` document."""
    picked: dict[str, Any] = {}
    for check in (doctor or {}).get("checks") or []:
        if check.get("rule") in rules:
            picked[check["rule"]] = {"outcome": check.get("outcome"), "note": check.get("note")}
    for finding in (doctor or {}).get("findings") or []:
        rule = finding.get("rule")
        if rule in rules:
            entry = picked.setdefault(rule, {"outcome": "found"})
            entry.setdefault("findings", []).append(
                {"severity": finding.get("severity"), "title": finding.get("title")}
            )
    return picked


def _failed_launch(launch: dict[str, Any], log_text: str) -> Verdict:
    doc = launch.get("out") if isinstance(launch.get("out"), dict) else None
    if doc is None or "error" not in doc:  # LaunchRefused and the like: nothing was started
        message = error_line(launch)
        if harness_problem(launch, message):
            return Verdict("not-run", "not run: " + shorten(message, 30), message)
        return Verdict("refused", refused_text(message), message)
    cause = str(doc.get("cause") or "")
    if cause.startswith("preflight"):
        message = str(doc.get("error") or cause)
        return Verdict("refused", "refused: preflight " + cause.removeprefix("preflight-"), message)
    line = engine_error(log_text) or engine_error("\n".join(doc.get("log_tail") or []))
    message = line or str(doc.get("error") or "launch failed")
    verdict = Verdict("engine-failure", "engine: " + shorten(short_engine(message), 40), message)
    if cause:
        verdict.notes.append(f"launch named the cause: {cause} ({doc.get('error')})")
    return verdict


def _level(bench: dict[str, Any] | None) -> dict[str, Any] | None:
    levels = (bench or {}).get("levels") or []
    return levels[0] if levels else None


def classify(
    method: str,
    version: str,
    steps: dict[str, dict[str, Any]],
    *,
    bench: dict[str, Any] | None = None,
    log_text: str = "",
) -> Verdict:
    """The cell's verdict from its steps (name -> {rc, out, stderr_tail, ...}), the saved
    bench report and the server log."""
    stage = steps.get("stage")
    if stage is not None and stage.get("rc") != 0:
        message = str(stage.get("error") or "staging the drafter failed")
        return Verdict("not-run", "not run: staging", message)
    render = steps.get("render")
    if render is None:
        return Verdict("not-run", "not run", "the cell did not start")
    if render.get("rc") != 0:
        message = error_line(render)
        if harness_problem(render, message):
            return Verdict("not-run", "not run: " + shorten(message, 30), message)
        return Verdict("refused", refused_text(message), message)
    launch = steps.get("launch")
    if launch is None:
        return Verdict("not-run", "not run", "launch did not run")
    if launch.get("rc") != 0:
        return _failed_launch(launch, log_text)
    level = _level(bench)
    if level is None or not level.get("completed"):
        line = engine_error(log_text)
        message = line or error_line(steps.get("bench") or {})
        return Verdict("engine-failure", "engine: " + shorten(short_engine(message), 40), message)
    return _served(method, version, steps, level)


def _served(
    method: str, version: str, steps: dict[str, dict[str, Any]], level: dict[str, Any]
) -> Verdict:
    al = level.get("spec_decode_acceptance_length")
    parse = (steps.get("parse-log") or {}).get("out")
    totals = (parse or {}).get("spec_decode_totals") if isinstance(parse, dict) else None
    notes = []
    if al is None and method != "none" and totals:
        al = totals.get("mean_acceptance_length")
        if al is not None:
            notes.append("acceptance length from the server log (no /metrics counters)")
    tok_s = level.get("output_throughput")
    doctor = (steps.get("doctor") or {}).get("out")
    bugs = known_bugs(doctor if isinstance(doctor, dict) else None)
    if bugs:
        bug, title = bugs[0]
        return Verdict("known-engine-bug", f"bug: {bug}", title, al, tok_s, bug, notes)
    if method == "none":
        text = f"works {tok_s:.0f} tok/s" if tok_s is not None else "works"
    elif al is None:
        text = "works, AL ?"
        notes.append("no spec-decode counters in /metrics nor the log")
    else:
        text = f"works AL {al:.2f}"
    if method in TRAINED and al is not None and al < NEAR_ZERO_AL:
        notes.append(
            f"acceptance length {al:.2f}: the drafter's tokens were almost never accepted "
            "(a trained drafter accepts far more on 0.32.0)"
        )
    if method == "dflash" and al is not None and al < NEAR_ZERO_AL and version.startswith("0.25."):
        notes.append(
            "vllm#49559 (0 % acceptance with speculators-trained drafters on 0.25's V2 runner) "
            "is known here, but doctor did not cite it: the server ran another runner"
        )
    if method == "eagle3" and al is not None:
        notes.append("random EAGLE-3 weights: an acceptance length near 1 is expected")
    return Verdict("works", text, "", al, tok_s, None, notes)
