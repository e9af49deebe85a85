"""The engine matrix's results JSON: written after every cell, read back to resume (pure but
for the file and the machine facts).

A cut run resumes from the same folder: cells with a final outcome are skipped (``--redo``
runs them again); ``not-run`` cells run again. Time adds up over the sessions.
"""

from __future__ import annotations

import json
import os
import platform
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine_matrix_cells import Cell, version_key
from engine_matrix_classify import FINAL

KIND = "dflashops-engine-matrix"
SCHEMA = 1


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_results(
    versions: list[str], methods: list[str], settings: dict[str, Any]
) -> dict[str, Any]:
    return {
        "kind": KIND,
        "schema": SCHEMA,
        "created_at": now(),
        "updated_at": now(),
        "versions": list(versions),
        "methods": list(methods),
        "settings": dict(settings),
        "machine": {},
        "command": "",
        "sessions": [],
        "total_s": 0.0,
        "runtimes": {},
        "lab": {"restarts": []},
        "eagle3": None,
        "cells": {},
    }


def load_results(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise ValueError(f"{path}: not an engine matrix results file (kind {KIND})")
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, this script writes {SCHEMA}")
    return doc


def save_results(path: Path, doc: dict[str, Any]) -> None:
    """Atomically: a run cut while writing keeps the previous file."""
    doc["updated_at"] = now()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def merge_scope(doc: dict[str, Any], versions: list[str], methods: list[str]) -> None:
    """A resumed run may add versions or methods; the document lists every one it holds."""
    doc["versions"] = sorted(set(doc.get("versions", [])) | set(versions), key=version_key)
    order = ["none", "ngram", "draft_model", "eagle3", "dflash"]
    held = set(doc.get("methods", [])) | set(methods)
    doc["methods"] = [m for m in order if m in held]


def pending(doc: dict[str, Any], wanted: list[Cell], redo: bool) -> list[Cell]:
    """The cells still to run: all with ``redo``, else those without a final outcome."""
    if redo:
        return list(wanted)
    recorded = doc.get("cells", {})
    return [c for c in wanted if (recorded.get(c.key) or {}).get("outcome") not in FINAL]


def record_cell(doc: dict[str, Any], cell: Cell, record: dict[str, Any]) -> None:
    doc.setdefault("cells", {})[cell.key] = {
        "version": cell.version,
        "method": cell.method,
        **record,
    }


def start_session(doc: dict[str, Any], command: str, machine: dict[str, Any]) -> dict[str, Any]:
    session = {"started_at": now(), "ended_at": None, "duration_s": 0.0, "command": command}
    doc.setdefault("sessions", []).append(session)
    doc["command"] = command
    doc["machine"] = machine
    return session


def close_session(doc: dict[str, Any], session: dict[str, Any], duration_s: float) -> None:
    """Called after every cell too, so a cut run keeps its time."""
    session["ended_at"] = now()
    session["duration_s"] = round(duration_s, 1)
    doc["total_s"] = round(sum(s.get("duration_s") or 0.0 for s in doc.get("sessions", [])), 1)


def machine_facts() -> dict[str, Any]:
    """What ran it: host, CPU model and count, memory, kernel, Python."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        memory_gib = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    return {
        "host": platform.node(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": memory_gib,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def describe_machine(machine: dict[str, Any]) -> str:
    if not machine:
        return "unknown"
    memory = f", {machine['memory_gib']} GiB" if machine.get("memory_gib") else ""
    cpu = machine.get("cpu") or "CPU"
    return f"{machine.get('cpus')} x {cpu}{memory}, Linux {machine.get('kernel')}"


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def key_outputs(out: Any) -> Any:
    """What the results JSON keeps of a step's JSON (the whole one is in the cell folder)."""
    if not isinstance(out, dict):
        return out
    keep = (
        *("action", "ready_in_s", "phases", "drafter_validation", "drafter_findings"),
        *("warnings", "engine_venv", "error", "cause", "rolled_back", "endpoint"),
        *("was_running", "pid", "engine_version", "spec_decode_totals", "throughput_totals"),
        *("notes", "path", "files", "bytes_sent"),
    )
    kept = {k: out[k] for k in keep if k in out}
    if "log_tail" in out:
        kept["log_tail"] = list(out["log_tail"])[-8:]
    if "findings" in out:
        kept["findings"] = [
            {k: f.get(k) for k in ("rule", "severity", "title")} for f in out["findings"]
        ]
    return kept
