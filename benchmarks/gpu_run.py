"""Issue 22 on the GPU host: the bundled server, bench, the k sweep, resumable across calls.

Run on the H200 host from the repository root, after the payload chunks were appended to
``/root/gpu/blob`` (``../shared/gpu/recv.sh``) and dflashops' wheel and its missing dependencies
were installed to ``/root/gpu/extra``::

    python3 benchmarks/gpu_run.py --payload .gpu/c1 --out $OUT --deadline-s 540

Steps (each skipped when ``/root/gpu/state`` says it is done, so a second call carries on):

1. unpack vLLM 0.26.0 (sha256 checked) to ``/root/gpu/site``; the model folders and request
   files made by ``benchmarks/gpu_models.py`` to ``/root/gpu``; record GPU, driver, versions;
2. per run of ``benchmarks/results/gpu-h200-specs/runs.json`` (rendered by
   ``benchmarks/gpu_specs.py`` through launch's renderer; ``--specs`` names another set, such as
   issue 23's ``gpu-h200x2-specs`` with TP=1 and TP=2 side by side): start
   ``python3 -m dflashops.server --spec <run>.json`` (preflight, then exec of vLLM), wait for
   /health, then measure single-stream decode with the independent client
   (``benchmarks/gpu_client.py``); for the bench runs also ``dflashops bench --url`` at
   concurrency 1, 4 and 16 and the independent client at the same levels and requests;
3. copy results.json, the facts and the server logs to ``--out`` after every run.

``--agree-rounds N`` (the second session's set, ``gpu_specs.py --set h200b``): for the runs in
``AGREE_RUNS`` the bench-against-client comparison at concurrency 4 and 16 is repeated N times
with longer levels (``AGREE_REQUESTS``; ``AGREE_REQUESTS_OF`` for the tiny server), the order of
the two clients alternating each round, so a level lasts several seconds and neither client
always meets a warmer server; ``--bracket`` makes each round client, bench, client (the third
session's tiny-server run), so a server that drifts between levels shows its own drift. A run whose
name ends in ``-pf`` is the preflight alone (``--preflight-only``): its exit code and report are
the result (the guessed drafter config: does the product refuse it on the GPU host?).

Analysis (tune-offline, roofline shares, tables) happens afterwards, off the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_client

REPO = Path(__file__).resolve().parents[1]
SPECS = REPO / "benchmarks" / "results" / "gpu-h200-specs"  # --specs: another set (tp2)
ROOT = Path(os.environ.get("GPU_RUN_ROOT", "/root/gpu"))  # another root: a dry run off the GPU
STATE = ROOT / "state"
EXTRA = ROOT / "extra"
T0 = time.monotonic()
# runs that also get `dflashops bench` at concurrency 1, 4, 16 next to the independent client
BENCH_RUNS = {"q8b-k4", "q8b-k0", "tiny-k4", "q27-tp1-k0", "q27-tp2-k0", "q27h-k0"}
LEVELS = (1, 4, 16)
# the 27B runs bench concurrency 1 only: the roofline share is a single-stream figure, and a
# two-GPU lease is too short for the rest
LEVELS_OF = {"q27-tp1-k0": (1,), "q27-tp2-k0": (1,), "q27h-k0": (1,)}
BENCH_REQUESTS = 24
# --agree-rounds: longer levels, repeated with the clients' order alternating
AGREE_RUNS = {"q8b-k4", "tiny-k4"}
AGREE_REQUESTS = {4: 48, 16: 96}
# the tiny server is 3-4x faster: twice the requests keep its levels at 5-10 s, not 2-4 s
AGREE_REQUESTS_OF = {"tiny-k4": {4: 96, 16: 192}}
SWEEP_REQUESTS = 6
MAX_TOKENS = 256


def log(*parts: object) -> None:
    print(f"[{time.monotonic() - T0:6.1f}s]", *parts, flush=True)


def sh(cmd: list[str], timeout: float = 120, env: dict[str, str] | None = None) -> str:
    # cwd /root/gpu: dflashops comes from the installed wheel, not this checkout
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False, cwd=ROOT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{cmd[0]}: {exc}"
    return (done.stdout + done.stderr).strip()


def engine_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{EXTRA}:{ROOT / 'site'}"
    env["PYTHONUNBUFFERED"] = "1"
    env["PATH"] = f"{EXTRA / 'bin'}:{env.get('PATH', '')}"
    return env


def setup(payload: Path) -> dict[str, Any]:
    facts_path = STATE / "facts.json"
    if facts_path.exists():
        facts: dict[str, Any] = json.loads(facts_path.read_text())
        return facts
    STATE.mkdir(parents=True, exist_ok=True)
    t = time.monotonic()
    want = (payload / "sha256").read_text().split()[0]
    digest = hashlib.sha256()
    with (ROOT / "blob").open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 24), b""):
            digest.update(chunk)
    if digest.hexdigest() != want:
        raise SystemExit(f"payload sha256 mismatch: {digest.hexdigest()} != {want}")
    site = ROOT / "site"
    shutil.rmtree(site, ignore_errors=True)
    site.mkdir(parents=True)
    subprocess.run(f"xz -dc -T0 {ROOT / 'blob'} | tar -C {site} -xf -", shell=True, check=True)
    for folder in (payload / "models").iterdir():
        dest = ROOT / folder.name
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(folder, dest)
    unpack_s = time.monotonic() - t
    dist = sorted(site.glob("vllm-*.dist-info"))
    vllm_version = dist[0].name.removeprefix("vllm-").removesuffix(".dist-info") if dist else "?"
    facts = {
        "unpack_s": round(unpack_s, 1),
        "nvidia_smi": sh(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem",
                "--format=csv",
            ]
        ),
        "python": sys.version,
        "torch": sh(
            [sys.executable, "-c", "import torch;print(torch.__version__, torch.version.cuda)"]
        ),
        "vllm": vllm_version,
        "dflashops": sh(
            [sys.executable, "-m", "dflashops", "--version"], env=engine_env(), timeout=60
        ),
        "kernel": sh(["uname", "-r"]),
    }
    facts_path.write_text(json.dumps(facts, indent=2))
    log("setup", json.dumps(facts))
    return facts


def weight_bytes(config: dict[str, Any]) -> int:
    """bf16 bytes of a dense Qwen3 decoder from its config (dummy weights have no files)."""
    if "text_config" in config:
        return hybrid_weight_bytes(config["text_config"])
    h, v, i = (int(config[key]) for key in ("hidden_size", "vocab_size", "intermediate_size"))
    heads, kv, hd = (
        int(config[key]) for key in ("num_attention_heads", "num_key_value_heads", "head_dim")
    )
    attn = h * heads * hd * 2 + h * kv * hd * 2 + 2 * hd
    layer = attn + 3 * h * i + 2 * h
    embed = v * h * (1 if config.get("tie_word_embeddings") else 2)
    return 2 * (int(config["num_hidden_layers"]) * layer + embed + h)


def hybrid_weight_bytes(text: dict[str, Any]) -> int:
    """bf16 bytes of Qwen3.5/3.6's language model (``Qwen3_5ForConditionalGeneration`` served
    ``--language-model-only``): gated full attention (q_proj holds the gate too) every 4th layer,
    Gated DeltaNet in the others, as vLLM's ``qwen3_next.py`` declares the projections."""
    h, v, i = (int(text[key]) for key in ("hidden_size", "vocab_size", "intermediate_size"))
    heads, kv, hd = (int(text[key]) for key in ("num_attention_heads", "num_key_value_heads",
                                                "head_dim"))  # fmt: skip
    nk, nv = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
    dk, dv = int(text["linear_key_head_dim"]), int(text["linear_value_head_dim"])
    conv = int(text.get("linear_conv_kernel_dim", 4))
    full = h * heads * hd * 2 + 2 * h * kv * hd + heads * hd * h + 2 * hd
    qkvz = h * (2 * nk * dk + 2 * nv * dv)
    linear = qkvz + h * 2 * nv + (2 * nk * dk + nv * dv) * conv + nv * dv * h + 2 * nv + dv
    mlp = 3 * h * i + 2 * h
    layers = text["layer_types"]
    total = sum((full if kind == "full_attention" else linear) + mlp for kind in layers)
    return 2 * (total + 2 * v * h + h)


def load_results() -> dict[str, Any]:
    path = STATE / "results.json"
    return dict(json.loads(path.read_text())) if path.exists() else {}


def save(results: dict[str, Any], out: Path) -> None:
    (STATE / "results.json").write_text(json.dumps(results, indent=2))
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(STATE / "results.json", out / "results.json")
    if (STATE / "facts.json").exists():
        shutil.copy(STATE / "facts.json", out / "facts.json")
    tails = []
    for run in sorted(STATE.iterdir()):
        server_log = run / "server.log"
        if not server_log.is_file():
            continue
        text = server_log.read_text(errors="replace")
        if run.name in BENCH_RUNS and len(text) < 12_000_000:
            (out / f"{run.name}.log").write_text(text)
        tails.append(f"\n===== {run.name}\n{text[-60_000:]}")
    (out / "server-log-tails.txt").write_text("".join(tails))


def wait_healthy(proc: subprocess.Popen[bytes], port: int, until: float) -> str | None:
    while time.monotonic() < until:
        if proc.poll() is not None:
            return f"server exited rc={proc.returncode}"
        try:
            status, _ = gpu_client.request(port, "GET", "/health", timeout=2)
            if status == 200:
                return None
        except OSError:
            pass
        time.sleep(0.5)
    return "deadline before healthy"


def stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGINT, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            continue


def bench(
    meta: dict[str, Any],
    workload: Path,
    weights: str,
    out_json: Path,
    *,
    levels: tuple[int, ...] | None = None,
    requests: int = BENCH_REQUESTS,
) -> dict[str, Any]:
    k = meta["k"]
    at = levels if levels is not None else LEVELS_OF.get(meta["run"], LEVELS)
    cmd = [
        sys.executable, "-m", "dflashops", "bench",
        "--url", f"http://127.0.0.1:{meta['port']}", "--model", meta["served_name"],
        "--api", "completions", "-w", str(workload),
        "-c", ",".join(map(str, at)),
        "-n", str(requests), "--warmup", "1", "--max-tokens", str(MAX_TOKENS),
        "--ignore-eos", "--temperature", "0", "--method", "dflash" if k else "none",
        "-k", str(k), "--label", meta["run"], "--gpu", "H200",
        "--tp", str(meta.get("tensor_parallel_size", 1)),
        "--weights", weights, "--out", str(out_json), "--json",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=engine_env(), timeout=300, check=False, cwd=ROOT
    )
    result: dict[str, Any] = {
        "cmd": " ".join(cmd[1:]),
        "rc": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "stderr_tail": done.stderr[-3000:],
    }
    if out_json.exists():
        result["report"] = json.loads(out_json.read_text())
    return result


def agreement_rounds(
    meta: dict[str, Any],
    workload: Path,
    weights: str,
    prompts: list[str],
    *,
    rounds: int,
    run_dir: Path,
    bracket: bool = False,
) -> list[dict[str, Any]]:
    """``rounds`` × (bench, client) per level in AGREE_REQUESTS, the order alternating.

    ``bracket``: client, bench, client instead, so a server whose speed drifts between levels
    (the CPU-bound tiny one) is compared with the client's levels on both sides of bench's, and
    the two client levels show how far the server itself moved.
    """
    out = []
    for r in range(rounds):
        for c, n in AGREE_REQUESTS_OF.get(meta["run"], AGREE_REQUESTS).items():
            row: dict[str, Any] = {"round": r, "concurrency": c, "requests": n}
            order: tuple[str, ...] = ("bench", "client") if r % 2 == 0 else ("client", "bench")
            if bracket:
                order = ("client", "bench", "client_after")
            for who in order:
                if who == "bench":
                    out_json = run_dir / f"agree-{r}-c{c}.json"
                    got = bench(meta, workload, weights, out_json, levels=(c,), requests=n)
                    levels = (got.get("report") or {}).get("levels") or [{}]
                    level = {k: v for k, v in levels[0].items() if k != "requests"}
                    row["bench"] = {"rc": got["rc"], "level": level, "cmd": got["cmd"]}
                else:
                    row[who] = gpu_client.level(
                        meta["port"], meta["served_name"], prompts,
                        concurrency=c, requests=n, max_tokens=MAX_TOKENS,
                    )  # fmt: skip
            row["order"] = list(order)
            clients = [row[w].get("output_tok_s") for w in ("client", "client_after") if w in row]
            log(meta["run"], "agree", r, c, bench_tok_s(row), clients)
            out.append(row)
    return out


def bench_tok_s(row: dict[str, Any]) -> float | None:
    level = row.get("bench", {}).get("level") or {}
    value = level.get("output_throughput", level.get("output_tok_s"))
    return float(value) if isinstance(value, (int, float)) else None


def preflight_only(name: str, specs: Path) -> dict[str, Any]:
    """The bundled server's checks alone: what the product says before any engine start."""
    spec = specs / f"{name}.json"
    cmd = [sys.executable, "-m", "dflashops.server", "--spec", str(spec), "--preflight-only"]
    started = time.monotonic()
    done = subprocess.run(
        cmd, capture_output=True, text=True, env=engine_env(), timeout=300, check=False, cwd=ROOT
    )
    res: dict[str, Any] = {
        "run": name,
        "cmd": " ".join(cmd[1:]),
        "rc": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "stdout_tail": done.stdout[-6000:],
        "stderr_tail": done.stderr[-6000:],
        "done": True,
    }
    log(name, "preflight-only rc", done.returncode, done.stderr[-400:])
    return res


def measure_run(
    name: str,
    meta: dict[str, Any],
    deadline: float,
    specs: Path = SPECS,
    *,
    agree_rounds: int = 0,
    bracket: bool = False,
) -> dict[str, Any]:
    run_dir = STATE / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    spec = specs / f"{name}.json"
    res: dict[str, Any] = {"run": name, "meta": meta, "spec": json.loads(spec.read_text())}
    cmd = [sys.executable, "-m", "dflashops.server", "--spec", str(spec)]
    log("launch", name, " ".join(cmd))
    launched = time.monotonic()
    with (run_dir / "server.log").open("wb") as server_log:
        proc = subprocess.Popen(
            cmd, stdout=server_log, stderr=subprocess.STDOUT, env=engine_env(),
            start_new_session=True, cwd=ROOT,
        )  # fmt: skip
    with (STATE / "pgids").open("a") as pgids:
        pgids.write(f"{proc.pid}\n")
    try:
        reserve = 100 if name in BENCH_RUNS else 25
        problem = wait_healthy(proc, meta["port"], deadline - reserve)
        res["start_s"] = round(time.monotonic() - launched, 1)
        preflight = run_dir / "preflight.json"
        if preflight.exists():
            res["preflight"] = json.loads(preflight.read_text())
        if problem:
            res["error"] = problem
            log(name, problem)
            return res
        log(name, "healthy after", res["start_s"], "s")
        model = ROOT / Path(meta["model"]).name
        config = json.loads((model / "config.json").read_text())
        workload = ROOT / "workloads" / ("tiny.jsonl" if name.startswith("tiny") else "q8b.jsonl")
        prompts = [json.loads(line)["prompt"] for line in workload.read_text().splitlines()]
        res["c1"] = gpu_client.level(
            meta["port"],
            meta["served_name"],
            prompts,
            concurrency=1,
            requests=SWEEP_REQUESTS,
            max_tokens=MAX_TOKENS,
        )
        log(name, "c1", {k: res["c1"][k] for k in ("output_tok_s", "median_tpot_ms")},
            res["c1"]["counters"])  # fmt: skip
        if name in BENCH_RUNS:
            weights = str(model) if name.startswith("tiny") else str(weight_bytes(config))
            res["weights"] = weights
            if agree_rounds and name in AGREE_RUNS:
                res["agree"] = agreement_rounds(
                    meta, workload, weights, prompts, rounds=agree_rounds, run_dir=run_dir,
                    bracket=bracket,
                )  # fmt: skip
                res["done"] = True
                return res
            res["bench"] = bench(meta, workload, weights, run_dir / "bench.json")
            log(name, "bench rc", res["bench"]["rc"], res["bench"]["stderr_tail"][-300:])
            res["client_levels"] = [
                gpu_client.level(
                    meta["port"],
                    meta["served_name"],
                    prompts,
                    concurrency=c,
                    requests=BENCH_REQUESTS,
                    max_tokens=MAX_TOKENS,
                )
                for c in LEVELS_OF.get(name, LEVELS)
            ]
            log(name, "client", [round(lv["output_tok_s"] or 0, 1) for lv in res["client_levels"]])
        res["done"] = True
        return res
    except Exception as exc:  # a broken measurement must not lose the rest of the run
        res["error"] = f"{type(exc).__name__}: {exc}"
        log(name, "error", res["error"])
        return res
    finally:
        # let vLLM write its last 1 s stats window (the log's spec-decode totals) before stopping
        time.sleep(2.5)
        stop(proc)
        time.sleep(2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--payload", type=Path, required=True, help="folder with sha256 and models/")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--runs", default="", help="comma list (default: all, in runs.json order)")
    ap.add_argument("--retry-failed", action="store_true", help="run again what failed before")
    ap.add_argument(
        "--specs", type=Path, default=SPECS, help="specs folder (gpu_specs.py --set tp2 writes one)"
    )
    ap.add_argument(
        "--agree-rounds", type=int, default=0, help="bench vs client rounds (AGREE_RUNS only)"
    )
    ap.add_argument(
        "--bracket",
        action="store_true",
        help="agreement rounds as client, bench, client (a server that drifts between levels)",
    )
    args = ap.parse_args()
    deadline = T0 + args.deadline_s
    pgids = STATE / "pgids"
    if pgids.exists():  # servers a killed earlier call left behind (their process groups only)
        for line in pgids.read_text().split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(line), signal.SIGKILL)
        pgids.unlink()
    facts = setup(args.payload)
    results = load_results()
    results["facts"] = facts
    metas = {m["run"]: m for m in json.loads((args.specs / "runs.json").read_text())["runs"]}
    order = [r for r in args.runs.split(",") if r] or list(metas)
    for name in order:
        prior = results.get(name) or {}
        engine_refused = str(prior.get("error", "")).startswith("server exited")
        if prior.get("done") or (engine_refused and not args.retry_failed):
            log("skip", name, "(done)" if prior.get("done") else f"({prior.get('error')})")
            continue
        if name.endswith("-pf"):
            results[name] = preflight_only(name, args.specs)
            save(results, args.out)
            continue
        need = 230 if name in BENCH_RUNS else 150
        if args.agree_rounds and name in AGREE_RUNS:
            need += 40 * args.agree_rounds
        if name.startswith("tiny"):
            need -= 40
        if name.startswith("q27"):  # 53.5 GB of dummy weights to initialise; TP=2 spawns two
            need += 90
        if deadline - time.monotonic() < need:
            log("not enough time left for", name)
            continue
        if args.agree_rounds and name in AGREE_RUNS and args.bracket:
            need += 15 * args.agree_rounds
        results[name] = measure_run(
            name,
            metas[name],
            deadline,
            args.specs,
            agree_rounds=args.agree_rounds,
            bracket=args.bracket,
        )
        save(results, args.out)
    save(results, args.out)
    log("done", [n for n in order if results.get(n, {}).get("done")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
