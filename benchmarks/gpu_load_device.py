"""The H200 side of ``gpu_load.py``: what the calls carried is unpacked, one server spec per served
configuration is rendered by launch's own renderer, served by the bundled server
(``python3 -m dflashops.server --spec``: preflight, then vLLM), benched at every level with
``dflashops bench`` and stopped.

Paths are the GPU host's (``/root/gpu``, as ``gpu_run.py``; ``GPU_RUN_ROOT`` moves them). The
module imports only the standard library at the top: ``gpu_load.py recv`` runs before the wheels
that carry dflashops and its dependencies are unpacked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_run

REPO = Path(__file__).resolve().parents[1]
ROOT = gpu_run.ROOT  # /root/gpu unless GPU_RUN_ROOT says otherwise
STATE = ROOT / "load"
EXTRA = ROOT / "extra"
SITE = ROOT / "site"
BLOB = ROOT / "blob"
WORKLOAD = "workloads/q8b.jsonl"  # 16 prompts of 128 vocabulary words (gpu_models.py's)
STOP_S = 12.0  # the stats window, SIGINT and the pause after a server (gpu_run's: ~6 s)
RECV_S = 40.0  # the second chunk: sha256 and unpacking vLLM (1.1-1.2 s in issue 22) and models


@dataclass(frozen=True)
class ModelSetup:
    """One target of the run and what a launch of it costs (RESULTS.md's H200 sessions)."""

    name: str
    title: str
    playbook: Path
    folders: tuple[str, ...]  # model folders under ROOT: target first
    max_tokens: int
    start_cold_s: float  # spawn to /health, the first server of a fresh machine
    start_warm_s: float
    bench_plain_s: float  # every level of one launch at k = 0 (the slowest)
    bench_spec_s: float


MODELS = {
    # Qwen3-8B shape: healthy in 211 s cold, 102-132 s warm (issue 22, first session)
    "q8b": ModelSetup(
        name="q8b",
        title="Qwen3-8B shape (36 layers, dummy weights) + DFlash drafter shape (5 layers)",
        playbook=REPO / "benchmarks" / "results" / "gpu-h200-playbooks" / "qwen3-8b-dflash.yaml",
        folders=("target", "drafter"),
        max_tokens=256,
        start_cold_s=230,
        start_warm_s=135,
        bench_plain_s=70,
        bench_spec_s=50,
    ),
    # dense 27B stand-in: healthy in 122.6-141.6 s (second and third sessions); 62.8 tok/s at
    # c=1 without speculation, so 128 tokens a request keep a launch's levels near 90 s
    "q27": ModelSetup(
        name="q27",
        title="dense 27B stand-in (64 layers, hidden 5120, dummy weights) + Qwen3.6-27B DFlash "
        "drafter shape",
        playbook=REPO
        / "benchmarks"
        / "results"
        / "gpu-h200x2-playbooks"
        / "qwen3-27b-dflash-tp1.yaml",
        folders=("target27", "drafter27"),
        max_tokens=128,
        start_cold_s=250,
        start_warm_s=160,
        bench_plain_s=100,
        bench_spec_s=60,
    ),
}


def log(*parts: object) -> None:
    gpu_run.log(*parts)


# --- carried in -------------------------------------------------------------------------------


def unpack_wheel(wheel: Path, dest: Path) -> None:
    """A wheel is a zip laid out for site-packages: unzip it there (no pip needed); the
    ``*.data/purelib`` and ``platlib`` trees go to the top, scripts and headers are skipped."""
    dest = dest.resolve()
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            if info.is_dir():
                continue
            parts = info.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            target = dest.joinpath(*parts).resolve()
            if not target.is_relative_to(dest):
                raise SystemExit(f"{wheel.name}: {info.filename} leaves the target folder")
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, target.open("wb") as out:
                shutil.copyfileobj(src, out)


def recv(folder: Path, *, first: bool) -> None:
    """Append the folder's payload chunk(s) to the blob, unpack its wheels, and once the sha256
    is there check and unpack vLLM to ``site`` and the model folders to ``ROOT``."""
    ROOT.mkdir(parents=True, exist_ok=True)
    STATE.mkdir(parents=True, exist_ok=True)
    if first:
        BLOB.write_bytes(b"")
        shutil.rmtree(EXTRA, ignore_errors=True)
    parts = sorted(folder.glob("part*"))
    with BLOB.open("ab") as out:
        for part in parts:
            with part.open("rb") as src:
                shutil.copyfileobj(src, out, 1 << 24)
    log("blob", BLOB.stat().st_size, "bytes after", [p.name for p in parts])
    wheels = sorted((folder / "wheels").glob("*.whl"))
    for wheel in wheels:
        unpack_wheel(wheel, EXTRA)
    if wheels:
        log("unpacked", len(wheels), "wheels to", EXTRA)
    sha = folder / "sha256"
    if sha.exists():
        want = sha.read_text().split()[0]
        digest = hashlib.sha256()
        with BLOB.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 24), b""):
                digest.update(chunk)
        if digest.hexdigest() != want:
            raise SystemExit(f"payload sha256 mismatch: {digest.hexdigest()} != {want}")
        shutil.rmtree(SITE, ignore_errors=True)
        SITE.mkdir(parents=True)
        started = time.monotonic()
        subprocess.run(f"xz -dc -T0 {BLOB} | tar -C {SITE} -xf -", shell=True, check=True)
        log("vLLM payload unpacked in", round(time.monotonic() - started, 1), "s")
    models = folder / "models.tar.xz"
    if models.exists():
        subprocess.run(["tar", "-C", str(ROOT), "-xJf", str(models)], check=True)
        log("model folders:", sorted(p.name for p in ROOT.iterdir() if p.is_dir()))
    if SITE.is_dir() and EXTRA.is_dir():
        facts(refresh=True)


def gpu_name() -> str:
    """nvidia-smi's name of the card (the bench's roofline knows it): a call may land on an
    H100 where H200 was asked for (2026-12-05's did), so the report must not say H200 blindly."""
    import gpu_load_core as core  # after import_paths: it imports dflashops

    return core.card_name(facts()) or "H200"


def facts(*, refresh: bool = False) -> dict[str, Any]:
    path = STATE / "facts.json"
    if path.exists() and not refresh:
        return dict(json.loads(path.read_text()))
    dist = sorted(SITE.glob("vllm-*.dist-info"))
    data = {
        "nvidia_smi": gpu_run.sh(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem",
                "--format=csv",
            ]
        ),
        "python": sys.version,
        "torch": gpu_run.sh(
            [sys.executable, "-c", "import torch;print(torch.__version__, torch.version.cuda)"]
        ),
        "vllm": dist[0].name.removeprefix("vllm-").removesuffix(".dist-info") if dist else "?",
        "dflashops": gpu_run.sh(
            [sys.executable, "-m", "dflashops", "--version"], env=gpu_run.engine_env(), timeout=60
        ),
        "kernel": gpu_run.sh(["uname", "-r"]),
    }
    STATE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2))
    log("facts", json.dumps(data))
    return data


def ready() -> str | None:
    """What is missing on this machine before a run (None: nothing)."""
    if not (SITE / "vllm").is_dir():
        return f"no vLLM under {SITE}: carry and recv the payload first (README)"
    if not (EXTRA / "dflashops").is_dir():
        return f"no dflashops under {EXTRA}: carry and recv the wheels first (README)"
    return None


def import_paths() -> None:
    """The driver imports dflashops (the wheel) and pydantic (the payload), as the server does."""
    for path in (SITE, EXTRA):
        if path.is_dir() and str(path) not in sys.path:
            sys.path.insert(0, str(path))


def kill_leftovers() -> None:
    """Servers a call cut by its time limit left behind (their process groups only)."""
    pgids = STATE / "pgids"
    if not pgids.exists():
        return
    for line in pgids.read_text().split():
        try:
            os.killpg(int(line), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            continue
    pgids.unlink()


# --- what a launch runs -----------------------------------------------------------------------


def load_book(setup: ModelSetup, max_num_seqs: int) -> Any:
    """The model's playbook with ``--max-num-seqs`` raised to hold the top level."""
    from dflashops.playbook.load import load_playbook

    book = load_playbook(setup.playbook)
    args = list(book.server.extra_args)
    if "--max-num-seqs" in args:
        args[args.index("--max-num-seqs") + 1] = str(max_num_seqs)
    else:
        args += ["--max-num-seqs", str(max_num_seqs)]
    return book.model_copy(update={"server": book.server.model_copy(update={"extra_args": args})})


def render_spec(
    setup: ModelSetup,
    served: int | list[list[int]],
    *,
    max_num_seqs: int,
    run_dir: Path,
    models_root: Path | None,
) -> dict[str, Any]:
    """The server spec of one served configuration, through launch's renderer (the product's
    ``served_playbook``: k, off, or a schedule), with the incident's synthetic acceptance curve
    cut at the largest k (vLLM wants one rate per draft position). ``models_root`` holds the
    model folders for launch's drafter check (its required environment); None skips it."""
    from dataclasses import replace

    import gpu_specs

    from dflashops.launch.args import TargetFacts
    from dflashops.launch.render import RenderInputs, build_spec
    from dflashops.tune.live_load import served_playbook

    book = served_playbook(load_book(setup, max_num_seqs), served)
    required_env: dict[str, str] = {}
    target = TargetFacts()
    if models_root is not None:
        required_env, target = gpu_specs.local_check(book, models_root)
    inputs = RenderInputs(
        supervisor="fallback", venv_python="python3", required_env=required_env, target=target
    )
    spec = build_spec(book, inputs)
    spec = replace(
        spec, preflight_report=str(run_dir / "preflight.json"), pidfile=str(run_dir / "server.pid")
    )
    k = served if isinstance(served, int) else max(entry[2] for entry in served)
    if k:
        rates = list(gpu_specs.INCIDENT_RATES[:k])
        spec = replace(spec, argv=gpu_specs.with_synthetic(spec.argv, rates))
    data: dict[str, Any] = spec.to_dict()
    return data


def server_argv(spec_path: Path, python: str = sys.executable) -> list[str]:
    return [python, "-m", "dflashops.server", "--spec", str(spec_path)]


def bench_out(run_dir: Path, levels: tuple[int, ...]) -> Path:
    return run_dir / f"bench-c{'-'.join(map(str, levels))}.json"


def bench_argv(
    setup: ModelSetup,
    *,
    k: int,
    label: str,
    levels: tuple[int, ...],
    requests: int,
    port: int,
    served_name: str,
    weights: str,
    out_json: Path,
    gpu: str = "H200",
    python: str = sys.executable,
) -> list[str]:
    """``dflashops bench --url`` at some levels (as ``gpu_run.py`` runs it); k is what the
    report records (the schedule's largest k: the server's num_speculative_tokens)."""
    return [
        python, "-m", "dflashops", "bench",
        "--url", f"http://127.0.0.1:{port}", "--model", served_name,
        "--api", "completions", "-w", str(ROOT / WORKLOAD),
        "-c", ",".join(map(str, levels)), "-n", str(requests), "--warmup", "1",
        "--max-tokens", str(setup.max_tokens), "--ignore-eos", "--temperature", "0",
        "--method", "dflash" if k else "none", "-k", str(k), "--label", label,
        "--gpu", gpu, "--tp", "1", "--weights", weights, "--out", str(out_json), "--json",
    ]  # fmt: skip


def weights_arg(setup: ModelSetup) -> str:
    """The target's bf16 bytes from its config (dummy weights have no files), for the roofline."""
    config = ROOT / setup.folders[0] / "config.json"
    if not config.exists():
        return "WEIGHT_BYTES"
    return str(gpu_run.weight_bytes(json.loads(config.read_text())))


def strip_requests(report: dict[str, Any]) -> dict[str, Any]:
    """A bench report without its per-request records (the full one stays on the machine)."""
    levels = [{**level, "requests": []} for level in report.get("levels", [])]
    return {**report, "levels": levels}


class DeviceServer:
    """``serve(served)`` and ``check_time(served)`` for :class:`gpu_load_core.LoadBench`."""

    def __init__(
        self,
        setup: ModelSetup,
        *,
        max_num_seqs: int,
        groups: list[tuple[tuple[int, ...], int]],
        deadline: float,
        out_of_time: Callable[[Any, float, float], Exception],
    ) -> None:
        self.setup, self.max_num_seqs, self.groups = setup, max_num_seqs, groups
        self.deadline, self.out_of_time = deadline, out_of_time
        self.state = STATE / setup.name
        self.book = load_book(setup, max_num_seqs)

    def _history(self) -> list[dict[str, Any]]:
        path = STATE / "launches.json"
        return list(json.loads(path.read_text())) if path.exists() else []

    def need_s(self, served: Any) -> float:
        """Seconds one more launch takes: start (cold on a fresh machine) + levels + stop, from
        this machine's earlier launches of the model when there are any (10 % over them)."""
        history = self._history()
        mine = [h for h in history if h["model"] == self.setup.name]
        warm = [h["start_s"] for h in mine if not h.get("cold")]
        if not history:
            start = self.setup.start_cold_s
        elif warm:
            start = max(self.setup.start_warm_s * 0.8, 1.1 * max(warm))
        else:
            start = self.setup.start_warm_s
        plain = served == 0
        same = [h["bench_s"] for h in mine if h.get("bench_s") and (h["k"] == 0) == plain]
        default = self.setup.bench_plain_s if plain else self.setup.bench_spec_s
        bench = 1.15 * max(same) if same else default
        return start + bench + STOP_S

    def check_time(self, served: Any) -> None:
        left = self.deadline - time.monotonic()
        need = self.need_s(served)
        if left < need:
            raise self.out_of_time(served, need, left)

    def serve(self, served: Any) -> dict[str, Any]:
        import gpu_load_core as core

        key = core.served_key(served)
        run_dir = self.state / key
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        spec = render_spec(
            self.setup, served, max_num_seqs=self.max_num_seqs, run_dir=run_dir, models_root=ROOT
        )
        spec_path = run_dir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=2) + "\n")
        cmd = server_argv(spec_path)
        log("launch", key, " ".join(cmd))
        record: dict[str, Any] = {"spec_argv": spec["argv"], "spec_env": spec["env"]}
        launched = time.monotonic()
        with (run_dir / "server.log").open("wb") as server_log:
            proc = subprocess.Popen(
                cmd, stdout=server_log, stderr=subprocess.STDOUT, env=gpu_run.engine_env(),
                start_new_session=True, cwd=ROOT,
            )  # fmt: skip
        with (STATE / "pgids").open("a") as pgids:
            pgids.write(f"{proc.pid}\n")
        try:
            problem = gpu_run.wait_healthy(proc, self.book.server.port, self.deadline)
            record["start_s"] = round(time.monotonic() - launched, 1)
            preflight = run_dir / "preflight.json"
            if preflight.exists():
                record["preflight"] = json.loads(preflight.read_text())
            if problem == "deadline before healthy":
                raise self.out_of_time(served, self.need_s(served), 0.0)
            if problem:
                tail = (run_dir / "server.log").read_text(errors="replace")[-3000:]
                record["error"] = f"{problem}; log tail: {tail}"
                log(key, problem)
                return record
            log(key, "healthy after", record["start_s"], "s")
            record.update(self._bench(served, key, run_dir))
            self._remember(served, record)
            return record
        finally:
            time.sleep(2.5)  # vLLM's last 1 s stats window into the log before stopping
            gpu_run.stop(proc)
            time.sleep(2)

    def _bench(self, served: Any, key: str, run_dir: Path) -> dict[str, Any]:
        k = served if isinstance(served, int) else max(entry[2] for entry in served)
        weights = weights_arg(self.setup)
        reports: list[dict[str, Any]] = []
        calls: list[dict[str, Any]] = []
        started = time.monotonic()
        error = None
        for levels, n in self.groups:
            out_json = bench_out(run_dir, levels)
            argv = bench_argv(
                self.setup, k=k, label=f"{self.setup.name} {key}", levels=levels, requests=n,
                port=self.book.server.port, served_name=self.book.served_name, weights=weights,
                out_json=out_json, gpu=gpu_name(),
            )  # fmt: skip
            left = self.deadline - time.monotonic()
            if left < 5:
                raise self.out_of_time(served, self.need_s(served), left)
            t = time.monotonic()
            try:
                done = subprocess.run(
                    argv, capture_output=True, text=True, env=gpu_run.engine_env(), cwd=ROOT,
                    timeout=left, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise self.out_of_time(served, self.need_s(served), 0.0) from None
            calls.append(
                {
                    "cmd": " ".join(argv[1:]),
                    "rc": done.returncode,
                    "seconds": round(time.monotonic() - t, 1),
                    "stderr_tail": done.stderr[-2000:],
                }
            )
            if done.returncode != 0 or not out_json.exists():
                error = f"bench at c={levels} rc={done.returncode}: {done.stderr[-600:]}"
                break
            reports.append(strip_requests(json.loads(out_json.read_text())))
            got = [(lv["max_concurrency"], round(lv["output_throughput"], 1))
                   for lv in reports[-1]["levels"]]  # fmt: skip
            log(key, "bench", got)
        result: dict[str, Any] = {
            "bench": calls,
            "reports": reports,
            "bench_s": round(time.monotonic() - started, 1),
        }
        if error:
            result["error"] = error
        return result

    def _remember(self, served: Any, record: dict[str, Any]) -> None:
        history = self._history()
        history.append(
            {
                "cold": not history,
                "model": self.setup.name,
                "k": served if isinstance(served, int) else -1,
                "start_s": record.get("start_s", 0.0),
                "bench_s": record.get("bench_s", 0.0),
            }
        )
        (STATE / "launches.json").write_text(json.dumps(history))


def save_out(out: Path, setup: ModelSetup, result: dict[str, Any], summary: str) -> list[Path]:
    """What comes back from the device: the result, the summary, the server logs' tails, the
    facts (four files; the run tool brings back eight at most)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"gpu-load-{setup.name}"
    written = [out / f"{stem}.json", out / f"{stem}.txt", out / f"{stem}-logs.txt"]
    written[0].write_text(json.dumps(result, indent=1) + "\n")
    written[1].write_text(summary)
    tails = []
    for run_dir in sorted((STATE / setup.name).glob("*")):
        server_log = run_dir / "server.log"
        if server_log.is_file():
            text = server_log.read_text(errors="replace")
            tails.append(f"\n===== {run_dir.name}\n{text[-40_000:]}")
    written[2].write_text("".join(tails))
    facts_path = STATE / "facts.json"
    if facts_path.exists():
        shutil.copy(facts_path, out / "facts.json")
        written.append(out / "facts.json")
    return written
