"""The engine matrix's run: runtimes, the lab, every cell's steps, the cleanup. Only a real run
executes this module (``engine_matrix.py`` without ``--plan``/``--report``)."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import engine_matrix_cells as mc
import engine_matrix_lab as lab
import engine_matrix_store as store
from engine_matrix_classify import cell_log, classify, doctor_rules
from engine_matrix_report import matrix_table
from rich.console import Console
from rich.markup import escape

from tests.support.vllm_slot import VllmSlot

SLOT_WAIT_S = 3600.0


class Matrix:
    def __init__(
        self,
        out: Path,
        versions: list[str],
        methods: list[str],
        settings: mc.Settings,
        command: str,
    ) -> None:
        self.out = out
        self.results = out / "results.json"
        self.versions, self.methods, self.settings = versions, methods, settings
        self.command = command
        self.console = Console(highlight=False)
        self.started = time.monotonic()
        self.doc: dict[str, Any] = {}
        self.session: dict[str, Any] = {}
        self.inventory = ""

    # ------------------------------------------------------------------ bookkeeping

    def save(self) -> None:
        store.close_session(self.doc, self.session, time.monotonic() - self.started)
        store.save_results(self.results, self.doc)

    def say(self, text: str) -> None:
        self.console.print(text)

    def timed(self, label: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` under a spinner; print one line with its duration and exit code."""
        started = time.monotonic()
        with self.console.status(f"{label} …"):
            result = fn(*args, **kwargs)
        rc = result.get("rc") if isinstance(result, dict) else 0
        mark = "[green]ok[/green]" if rc == 0 else f"[red]exit {rc}[/red]"
        self.say(f"  {label:<34} {time.monotonic() - started:7.1f} s  {mark}")
        return result

    # ------------------------------------------------------------------ phases

    def run(self, *, redo: bool, keep_runtimes: bool) -> dict[str, Any]:
        self.out.mkdir(parents=True, exist_ok=True)
        if self.results.exists():
            self.doc = store.load_results(self.results)
        else:
            self.doc = store.new_results(self.versions, self.methods, vars(self.settings))
        store.merge_scope(self.doc, self.versions, self.methods)
        self.session = store.start_session(self.doc, self.command, store.machine_facts())
        todo = store.pending(self.doc, mc.cells(self.versions, self.methods), redo)
        self.say(f"engine matrix: {len(todo)} cells to run; results {self.results}")
        slot = VllmSlot()
        with self.console.status("waiting for the machine-wide vLLM slot …"):
            slot.acquire(SLOT_WAIT_S)
        try:
            lab_was_up = bool(lab.lab_status().get("running"))
            ready = self.runtimes(sorted({c.version for c in todo}, key=mc.version_key))
            if any(c.method == "eagle3" for c in todo):
                self.eagle3()
            if ready:
                self.lab_ready(ready)
            for index, cell in enumerate(todo, 1):
                self.say(f"[bold][{index}/{len(todo)}] vLLM {cell.version} x {cell.method}[/bold]")
                try:
                    self.cell(cell, ready)
                except KeyboardInterrupt:
                    self.say("interrupted: stopping the server in lab-ct1; the run resumes later")
                    lab.run_cli(
                        [*lab.CLI, "-i", self.inventory, "stop", mc.CONTAINER], timeout_s=120
                    )
                    raise
            if not keep_runtimes:
                self.cleanup(lab_was_up)
        finally:
            self.save()
            slot.release()
        self.say("\n".join(matrix_table(self.doc)))
        return {"cells": len(todo), "results": str(self.results)}

    def runtimes(self, versions: list[str]) -> list[str]:
        """Install each version's runtime; the versions that have one."""
        ready = []
        for version in versions:
            entry = self.doc["runtimes"].setdefault(version, {})
            if "existed_before" not in entry:
                entry["existed_before"] = lab.runtime_exists(version)
                entry["installed_by_matrix"] = False
            entry["venv"] = str(lab.runtime_dir(version))
            if lab.runtime_present(version):
                entry["error"] = None
                ready.append(version)
            else:
                step = self.timed(f"runtime {version}", lab.install_runtime, version, self.out)
                if not entry["existed_before"]:
                    entry["installed_by_matrix"] = True
                entry["install_s"] = step.get("duration_s")
                entry["error"] = None if step["rc"] == 0 else lab_error(step)
                entry["removed"] = False
                if step["rc"] == 0:
                    ready.append(version)
            if lab.runtime_exists(version):
                entry["disk_bytes"] = lab.dir_size(lab.runtime_dir(version))
                entry["facts"] = lab.runtime_facts(version)
            self.save()
        return ready

    def eagle3(self) -> None:
        folder = self.out / mc.EAGLE3_DIR
        step = self.timed("build the EAGLE-3 drafter", lab.build_eagle3, folder)
        self.doc["eagle3"] = {"path": str(folder), **{k: step[k] for k in ("rc", "duration_s")}}
        if step["rc"] != 0:
            self.doc["eagle3"]["error"] = lab_error(step)
        self.save()

    def lab_ready(self, versions: list[str]) -> None:
        status = lab.lab_status()
        running = bool(status.get("running"))
        missing = lab.missing_mounts(status.get("mounts") or {}, versions)
        if not running or missing:
            reason = "not running" if not running else f"not mounted: {', '.join(missing)}"
            started = time.monotonic()
            step = self.timed(
                f"lab restart ({reason})", lambda: _last(lab.restart_lab(running, self.out))
            )
            self.doc["lab"]["restarts"].append(
                {
                    "at": store.now(),
                    "reason": reason,
                    "duration_s": round(time.monotonic() - started, 1),
                    "rc": step["rc"],
                }
            )
            status = lab.lab_status()
            if not status.get("running"):
                raise SystemExit(f"error: the lab did not come up: {lab_error(step)}")
        self.inventory = str(status.get("inventory") or lab.LAB_INVENTORY.expanduser())
        step = self.timed("provision lab-ct1", lab.provision, self.inventory)
        if step["rc"] != 0:
            raise SystemExit(f"error: provision lab-ct1 failed: {lab_error(step)}")

    # ------------------------------------------------------------------ one cell

    def cell(self, cell: mc.Cell, ready: list[str]) -> None:
        cell_dir = self.out / "cells" / cell.slug
        shutil.rmtree(cell_dir, ignore_errors=True)
        cell_dir.mkdir(parents=True)
        started = time.monotonic()
        since = datetime.now(UTC)
        steps: dict[str, dict[str, Any]] = {}
        record: dict[str, Any] = {"started_at": store.now(), "settings": vars(self.settings)}
        if cell.version not in ready:
            error = self.doc["runtimes"].get(cell.version, {}).get("error") or "no runtime"
            steps["runtime"] = {"rc": 1, "error": error}
            verdict_doc = {"outcome": "not-run", "text": "not run: runtime", "message": error}
            self.finish(cell, record, steps, verdict_doc, started)
            return
        playbook = mc.write_playbook(self.out, cell, self.settings)
        record["playbook"] = str(playbook.relative_to(self.out))
        if cell.method == "eagle3":
            eagle3 = self.doc.get("eagle3") or {}
            if eagle3.get("rc") != 0:
                steps["stage"] = {"rc": 1, "error": eagle3.get("error") or "no EAGLE-3 drafter"}
            else:
                steps["stage"] = self.timed(
                    "stage", lab.stage_eagle3, self.inventory, self.out / mc.EAGLE3_DIR
                )
        plan = mc.cell_steps(lab.CLI, self.inventory, playbook, cell_dir, self.settings)
        if steps.get("stage", {"rc": 0})["rc"] == 0:
            done: dict[str, int] = {}
            while todo := mc.next_steps(done):
                step = plan[todo[0]]
                steps[step.name] = self.timed(
                    step.name,
                    lab.run_cli,
                    step.argv,
                    stdout_file=cell_dir / step.stdout if step.stdout else None,
                    stderr_file=cell_dir / f"{step.name}.stderr.log",
                    timeout_s=step.timeout_s,
                )
                done[step.name] = steps[step.name]["rc"]
                if step.name == "logs":
                    full = cell_dir / "server.full.log"
                    (cell_dir / "server.log").write_text(
                        cell_log(store.read_text(full), since), encoding="utf-8"
                    )
                    full.unlink(missing_ok=True)
        bench = store.read_json(cell_dir / "bench.json")
        log_text = store.read_text(cell_dir / "server.log")
        verdict = classify(cell.method, cell.version, steps, bench=bench, log_text=log_text)
        doctor = steps.get("doctor", {}).get("out")
        record["doctor_rules"] = doctor_rules(
            doctor if isinstance(doctor, dict) else None, ("engine", "drafter-check")
        )
        self.finish(cell, record, steps, verdict.to_json(), started)

    def finish(
        self,
        cell: mc.Cell,
        record: dict[str, Any],
        steps: dict[str, dict[str, Any]],
        verdict: dict[str, Any],
        started: float,
    ) -> None:
        for step in steps.values():  # the full documents are in the cell folder
            if step.get("argv"):
                step["command"] = " ".join(str(a) for a in step.pop("argv"))
            step["out"] = store.key_outputs(step.get("out"))
        record.update(verdict)
        record["steps"] = steps
        record["duration_s"] = round(time.monotonic() - started, 1)
        store.record_cell(self.doc, cell, record)
        self.save()
        colour = "green" if verdict["outcome"] == "works" else "yellow"
        message = str(verdict.get("message") or "")
        shown = message if message and message not in verdict["text"].rstrip("…") else ""
        self.say(f"  → [{colour}]{escape(verdict['text'])}[/{colour}]  {escape(shown)}")

    # ------------------------------------------------------------------ cleanup

    def cleanup(self, lab_was_up: bool) -> None:
        removable = [
            v
            for v, rt in self.doc["runtimes"].items()
            if rt.get("installed_by_matrix") and not rt.get("removed") and v != mc.DEFAULT_RUNTIME
        ]
        if not removable:
            return
        self.timed("lab down (to remove runtimes)", lab.run_cli, [*lab.CLI, "lab", "down"])
        running = bool(lab.lab_status().get("running"))
        for version in removable:
            why = lab.remove_runtime(version, lab_running=running)
            self.doc["runtimes"][version]["removed"] = why is None
            self.say(f"  runtime {version}: " + ("removed" if why is None else f"kept: {why}"))
        self.save()
        if lab_was_up:
            self.timed("lab up (as it was)", lab.run_cli, [*lab.CLI, "lab", "up", "--json"])


def _last(steps: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [s for s in steps if s["rc"] != 0]
    return failed[0] if failed else steps[-1]


def lab_error(step: dict[str, Any]) -> str:
    from engine_matrix_classify import error_line

    return error_line(step)
