"""Serve the lab's tiny Qwen3 with a real SGLang on the CPU and keep what it says (issue 37).

The command line and the engine's environment are the product's own (``build_spec`` of
``dflashops.launch.render`` from a playbook with ``server.device: cpu``), readiness is the
product's (``/health``, ``/v1/models``, a 1-token completion). Then: ``/health``,
``/health_generate`` and ``/v1/models`` once more, ``--requests`` OpenAI completions one at a
time (timed: ``throughput.tok_s`` in ``summary.json``), a ``/metrics`` scrape, ``--generate``
native ``/generate`` requests on the next prompts (their whole ``meta_info`` kept), a second
scrape and ``/get_server_info``. The scrapes bracket only the ``/generate`` requests, so their
counters can be checked against those requests' own numbers. Everything goes to ``--out``
(``server.log``, ``spec.json``, ``metrics-{before,after}.txt``, ``server_info.json``,
``summary.json``); ``--fixtures-only`` turns such a folder into the committed fixtures
(``tests/fixtures/{logs,metrics,sglang}/real-*sglang*``, home paths replaced by ``/opt/lab``).

The SGLang runtime is not something dflashops installs: SGLang's CPU backend needs
``sgl-kernel`` built from the SGLang repository's CPU sources, which no package registry
ships, and this repository carries no recipe that builds it. Point ``--python`` at the
interpreter of a venv holding SGLang and such a kernel::

    .venv/bin/python benchmarks/sglang_cpu_capture.py \
        --python ~/.cache/dflashops/lab/venv-sglang-cpu-0.5.16/bin/python --version 0.5.16 \
        --method ngram --k 4 --out ~/.cache/dflashops/lab/sglang-capture/ngram
    .venv/bin/python benchmarks/sglang_cpu_capture.py --python ... --version 0.5.16 \
        --method ngram --out ~/.cache/dflashops/lab/sglang-capture/ngram --fixtures-only

Seen here (2 cores, SGLang 0.5.16, bfloat16): ready in 20 to 35 s (n-gram compiles its C++
corpus at first use); SGLang answers the stop's SIGTERM by treating its scheduler's exit as a
crash (SIGQUIT to itself), so the server's exit code is -9. EAGLE-3 (``--drafter``) needs the
drafter's capture layers under ``eagle_config.eagle_aux_hidden_state_layer_ids`` (SGLang reads
no top-level key and adds 1 to each id); without them it captures the default layers and fails
at the first request (``mat1 and mat2 shapes cannot be multiplied``).

One server at a time: the script refuses to start while another vLLM or SGLang server runs,
and stops its own (the whole process group) before it exits.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from dflashops.launch.readiness import HttpProber, ProcessView, wait_ready
from dflashops.launch.render import RenderInputs, build_spec
from dflashops.playbook.models import Playbook

LAB = Path.home() / ".cache" / "dflashops" / "lab"
TARGET = LAB / "models" / "tiny-qwen3"
PROMPTS = LAB / "models" / "prompts.jsonl"
SERVED = "tiny"
STOP_WAIT_S = 30.0
# what a lab SGLang process gets besides the spec's env: offline
ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
}
# g++ 12 and SGLang's JIT n-gram corpus sources (result.h uses size_t without <cstddef>): the
# venv's bin/cxx-include-cstddef, when there (a shell script: exec c++ -include cstddef "$@"),
# becomes CXX. A CXX with arguments ("c++ -include cstddef") would break torch inductor, which
# EAGLE-3 on the CPU compiles with ("No working C++ compiler found").
CXX_WRAPPER = "cxx-include-cstddef"


def playbook(args: argparse.Namespace) -> Playbook:
    drafter: dict[str, Any] = {"method": args.method}
    if args.drafter is not None:
        drafter["model"] = {"path": str(args.drafter)}
    server: dict[str, Any] = {
        "device": "cpu",
        "host": "127.0.0.1",
        "port": args.port,
        "max_model_len": args.max_model_len,
        "extra_args": [
            "--dtype",
            args.dtype,
            "--max-total-tokens",
            str(args.max_total_tokens),
            "--decode-log-interval",
            str(args.decode_log_interval),
            *args.extra,
        ],
    }
    if args.method != "none":
        server["num_speculative_tokens"] = args.k
    return Playbook.model_validate(
        {
            "name": f"sglang-cpu-{args.method}",
            "model": {"path": str(args.target), "served_name": SERVED},
            "drafter": drafter,
            "engine": {"name": "sglang", "version": args.version},
            "server": server,
        }
    )


def engines_running() -> list[str]:
    """Command lines of vLLM or SGLang servers already running on this machine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "sglang.launch_server" in cmdline or "vllm.entrypoints" in cmdline:
            found.append(f"{entry.name}: {cmdline[:160]}")
    return found


def prompts(count: int, kind: str, start: int = 0) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in PROMPTS.read_text(encoding="utf-8").splitlines() if line]
    chosen = [r for r in rows if r.get("kind") == kind] or rows
    return [chosen[i % len(chosen)] for i in range(start, start + count)]


def scrape(client: httpx.Client, path: Path) -> None:
    response = client.get("/metrics")
    path.write_text(
        response.text if response.status_code == 200 else f"# HTTP {response.status_code}\n",
        encoding="utf-8",
    )


def stop(process: subprocess.Popen[bytes]) -> int | None:
    if process.poll() is not None:
        return process.returncode
    os.killpg(process.pid, signal.SIGTERM)
    try:
        return process.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        return process.wait(STOP_WAIT_S)


def run(args: argparse.Namespace) -> int:
    if args.fixtures_only:
        for path in write_fixtures(args.out, args.fixtures, args.version, args.method):
            print(path)
        return 0
    if args.dry_run:
        book = playbook(args)
        inputs = RenderInputs(supervisor="fallback", venv_python=str(args.python))
        print(build_spec(book, inputs).to_json())
        return 0
    others = engines_running()
    if others:
        print("another vLLM/SGLang server runs; not starting:\n  " + "\n  ".join(others))
        return 3
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    spec = build_spec(
        playbook(args), RenderInputs(supervisor="fallback", venv_python=str(args.python))
    )
    argv = spec.argv
    (out / "spec.json").write_text(spec.to_json() + "\n", encoding="utf-8")
    env = {**os.environ, **ENV, **spec.env}
    wrapper = args.python.parent / CXX_WRAPPER
    if wrapper.exists():
        env["CXX"] = str(wrapper)
    log = (out / "server.log").open("wb")
    started = time.monotonic()
    process = subprocess.Popen(
        ["nice", "-n", str(args.nice), *argv],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    summary: dict[str, Any] = {"argv": argv, "pid": process.pid}
    base = f"http://127.0.0.1:{args.port}"
    prober = HttpProber(base, SERVED)
    try:
        result = wait_ready(
            lambda: ProcessView(process.poll() is None, process.returncode),
            prober,
            model=SERVED,
            timeout_s=args.ready_timeout,
            poll_s=2.0,
            progress=lambda text: print(text, flush=True),
        )
        summary["readiness"] = {
            "phase": str(result.phase),
            "elapsed_s": round(result.elapsed_s, 1),
            "reached": {str(k): round(v, 1) for k, v in result.reached.items()},
            "last_detail": result.last.detail if result.last else None,
        }
        if not result.ready:
            return 1
        summary["requests"] = exercise(base, args, out)
        summary["throughput"] = throughput(summary["requests"])
        return 0
    finally:
        prober.close()
        summary["exit_code"] = stop(process)
        summary["wall_s"] = round(time.monotonic() - started, 1)
        log.close()
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
        print(json.dumps({k: v for k, v in summary.items() if k != "argv"}, indent=1))


def exercise(base: str, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Health, the OpenAI completions (timed, one at a time), a scrape, native /generate
    requests on other prompts, a scrape: the scrapes' window holds only the /generate
    requests, so its counters can be checked against their ``meta_info``."""
    done: list[dict[str, Any]] = []
    with httpx.Client(base_url=base, timeout=600.0) as client:
        for path in ("/health", "/health_generate", "/v1/models"):
            reply = client.get(path)
            done.append({"path": path, "status": reply.status_code, "body": reply.text[:300]})
        for row in prompts(args.requests, args.prompt_kind):
            begun = time.monotonic()
            reply = client.post(
                "/v1/completions",
                json={
                    "model": SERVED,
                    "prompt": row["prompt"],
                    "max_tokens": args.max_tokens,
                    "temperature": 0,
                },
            )
            body = reply.json() if reply.status_code == 200 else {}
            done.append(
                {
                    "path": "/v1/completions",
                    "id": row.get("id"),
                    "status": reply.status_code,
                    "s": round(time.monotonic() - begun, 3),
                    "usage": body.get("usage"),
                }
            )
        scrape(client, out / "metrics-before.txt")
        for row in prompts(args.generate, args.prompt_kind, start=args.requests):
            begun = time.monotonic()
            reply = client.post(
                "/generate",
                json={
                    "text": row["prompt"],
                    "sampling_params": {"max_new_tokens": args.max_tokens, "temperature": 0},
                },
            )
            body = reply.json() if reply.status_code == 200 else {}
            meta = body.get("meta_info", {}) if isinstance(body, dict) else {}
            done.append(
                {
                    "path": "/generate",
                    "id": row.get("id"),
                    "status": reply.status_code,
                    "s": round(time.monotonic() - begun, 3),
                    "meta_info": meta,
                }
            )
        time.sleep(args.settle_s)  # gauges are set per decode-log interval
        scrape(client, out / "metrics-after.txt")
        info = client.get("/get_server_info")
        (out / "server_info.json").write_text(info.text, encoding="utf-8")
    return done


# what the /generate fixture keeps of /get_server_info (server args and the scheduler's state)
SERVER_INFO_KEYS = (
    "version",
    "device",
    "dtype",
    "attention_backend",
    "context_length",
    "enable_metrics",
    "decode_log_interval",
    "speculative_algorithm",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "speculative_num_draft_tokens",
)
STATE_KEYS = ("avg_spec_accept_length", "last_gen_throughput", "memory_usage")


def write_fixtures(out: Path, fixtures: Path, version: str, method: str) -> list[Path]:
    """The capture in ``out`` as the committed fixtures: the log (home paths replaced by
    ``/opt/lab``), the two scrapes, and for a speculating run the /generate meta_info with the
    server info's keys of interest."""
    name = f"real-sglang-{version}-cpu-{method}"
    # a log without spec-decode lines goes beside the JSON (every log under logs/ has them)
    written = [fixtures / ("sglang" if method == "none" else "logs") / f"{name}.log"]
    written[0].write_text(sanitize((out / "server.log").read_text(errors="replace")))
    for when in ("before", "after"):
        target = fixtures / "metrics" / f"{name}-{when}.txt"
        target.write_text((out / f"metrics-{when}.txt").read_text())
        written.append(target)
    summary = json.loads((out / "summary.json").read_text())
    info = json.loads((out / "server_info.json").read_text())
    states = info.get("internal_states") or [{}]
    kept = {
        "server_info": {k: info.get(k) for k in SERVER_INFO_KEYS},
        "internal_states[0]": {k: states[0].get(k) for k in STATE_KEYS if k in states[0]},
        "readiness": summary["readiness"],
        "throughput": summary.get("throughput"),
        "requests": summary["requests"],
    }
    target = fixtures / "sglang" / f"real-{version}-cpu-{method}-generate.json"
    target.write_text(sanitize(json.dumps(kept, indent=1)) + "\n")
    return [*written, target]


def sanitize(text: str) -> str:
    return text.replace(str(LAB), "/opt/lab").replace(str(Path.home()), "/opt/lab/home")


def throughput(requests: list[dict[str, Any]]) -> dict[str, Any]:
    """Completion tokens per second of the sequential OpenAI requests (one at a time)."""
    done = [r for r in requests if r["path"] == "/v1/completions" and r.get("usage")]
    tokens = sum(int(r["usage"]["completion_tokens"]) for r in done)
    seconds = sum(float(r["s"]) for r in done)
    return {
        "requests": len(done),
        "completion_tokens": tokens,
        "seconds": round(seconds, 3),
        "tok_s": round(tokens / seconds, 2) if seconds else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", type=Path, required=True, help="the SGLang venv's python")
    parser.add_argument("--version", required=True, help="the SGLang release in that venv")
    parser.add_argument("--method", default="none", choices=("none", "ngram", "eagle", "eagle3"))
    parser.add_argument("--drafter", type=Path, help="the drafter folder (eagle, eagle3)")
    parser.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    parser.add_argument("--target", type=Path, default=TARGET)
    parser.add_argument("--port", type=int, default=30137)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--max-model-len", type=int, default=512)
    parser.add_argument("--max-total-tokens", type=int, default=4096)
    parser.add_argument("--decode-log-interval", type=int, default=8)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--generate", type=int, default=4, help="native /generate requests")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--prompt-kind", default="ngram", help="the lab prompts' kind")
    parser.add_argument("--settle-s", type=float, default=1.0)
    parser.add_argument("--ready-timeout", type=float, default=900.0)
    parser.add_argument("--nice", type=int, default=19)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true", help="print the spec, start nothing")
    parser.add_argument(
        "--fixtures-only",
        action="store_true",
        help="start nothing: write --out's capture as fixtures under --fixtures",
    )
    parser.add_argument(
        "--fixtures", type=Path, default=Path(__file__).parents[1] / "tests" / "fixtures"
    )
    parser.add_argument("extra", nargs="*", help="more SGLang arguments (after --)")
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
