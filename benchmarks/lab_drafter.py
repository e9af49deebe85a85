"""The lab's trained DFlash drafter, measured: build time, acceptance, and k against k=1.

Run on demand (needs the lab runtime; ``build`` rebuilds the models into a temp folder, the
others use the cached build)::

    .venv/bin/python benchmarks/lab_drafter.py build
    .venv/bin/python benchmarks/lab_drafter.py acceptance [--k 4]
    .venv/bin/python benchmarks/lab_drafter.py k-sweep [--ks 1,2,3,4] [--repeats 3]

``build``: a fresh ``dflashops lab models`` build (tokenizer, target training, drafts, the
drafter's data, training and export), timed per progress line.
``acceptance``: vLLM CPU servers (the lab runtime, outside any container, through the bundled
server as the tests start them) with the trained drafter and with its guessed-config copy at k,
each sent the lab's completion prompts greedily; mean acceptance length and per-position
acceptance from the server's ``vllm:spec_decode_*`` counters.
``k-sweep``: one server per k with the trained drafter; each sends the prompts ``repeats``
times; output tok/s per repeat, its mean and spread (the bench's noise), so k* can be compared
with k=1 against the noise.

Each run prints one JSON document and appends it to ``benchmarks/results/lab-drafter.jsonl``.
Servers hold the machine-wide vLLM slot (``/tmp/dflashops-vllm.slot``) while they run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from dflashops.lab.models.ensure import ensure_lab_models  # noqa: E402
from dflashops.lab.models.layout import LabModels, default_models_dir  # noqa: E402
from dflashops.lab.runtime import ensure_runtime  # noqa: E402
from tests.support.vllm_servers import (  # noqa: E402
    MODEL_NAME,
    ServerPool,
    VllmServer,
    spec_decode_counts,
)

RESULTS = REPO / "benchmarks" / "results" / "lab-drafter.jsonl"
GUESSED = "tiny-qwen3-dflash-guessed"
PROMPT_KIND = "decay"  # plain completion prompts cut from the corpus


class DrafterPool(ServerPool):
    """The test pool, with kinds ``dflash@K`` and ``guessed@K`` (a DFlash drafter at k=K)."""

    def speculative_config(self, kind: str) -> tuple[dict[str, Any], Path | None]:
        name, _, k = kind.partition("@")
        drafter = self.models.root / GUESSED if name == "guessed" else self.models.dflash
        config = {"method": "dflash", "model": str(drafter), "num_speculative_tokens": int(k)}
        return config, drafter


def _send_prompts(server: VllmServer, prompts: list[dict[str, Any]]) -> tuple[int, float]:
    """(completion tokens, seconds) for the prompts sent one at a time, greedily."""
    tokens, started = 0, time.monotonic()
    with server.client(timeout=300) as client:
        for record in prompts:
            response = client.post(
                "/v1/completions",
                json={
                    "model": MODEL_NAME,
                    "prompt": record["prompt"],
                    "max_tokens": 128,
                    "temperature": 0,
                    "ignore_eos": True,
                },
            )
            response.raise_for_status()
            tokens += int(response.json()["usage"]["completion_tokens"])
    return tokens, time.monotonic() - started


def _acceptance(server: VllmServer, prompts: list[dict[str, Any]]) -> dict[str, Any]:
    before_drafts, before_pos = spec_decode_counts(server.metrics())
    tokens, seconds = _send_prompts(server, prompts)
    drafts, per_pos = spec_decode_counts(server.metrics())
    drafts -= before_drafts
    accepted = {p: n - before_pos.get(p, 0.0) for p, n in per_pos.items()}
    rates = [round(accepted[p] / drafts, 4) if drafts else 0.0 for p in sorted(accepted)]
    return {
        "num_drafts": drafts,
        "mean_acceptance_length": round(1 + sum(accepted.values()) / drafts, 4) if drafts else None,
        "per_position": rates,
        "output_tok_s": round(tokens / seconds, 2),
    }


def _pool(models: LabModels, workdir: Path) -> DrafterPool:
    return DrafterPool(ensure_runtime(), models, workdir)


def cmd_build(_args: argparse.Namespace) -> dict[str, Any]:
    runtime = ensure_runtime()
    steps: list[tuple[float, str]] = []
    started = time.monotonic()

    def say(message: str) -> None:
        steps.append((round(time.monotonic() - started, 1), message))
        print(f"[{steps[-1][0]:7.1f}s] {message}", file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        ensure_lab_models(runtime, Path(tmp) / "models", force=True, progress=say)
    return {"build_s": round(time.monotonic() - started, 1), "steps": steps}


def cmd_acceptance(args: argparse.Namespace) -> dict[str, Any]:
    models = LabModels(default_models_dir())
    prompts = models.read_prompts(PROMPT_KIND)
    out: dict[str, Any] = {"k": args.k, "prompts": len(prompts), "prompt_kind": PROMPT_KIND}
    with tempfile.TemporaryDirectory() as tmp:
        pool = _pool(models, Path(tmp))
        try:
            for name in ("dflash", "guessed"):
                server = pool.get(f"{name}@{args.k}")
                out[name] = _acceptance(server, prompts)
                out[name]["started_in_s"] = server.started_in_s
        finally:
            pool.stop()
    return out


def cmd_k_sweep(args: argparse.Namespace) -> dict[str, Any]:
    models = LabModels(default_models_dir())
    prompts = models.read_prompts(PROMPT_KIND)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        pool = _pool(models, Path(tmp))
        try:
            for k in (int(k) for k in args.ks.split(",")):
                server = pool.get(f"dflash@{k}")
                _send_prompts(server, prompts[:2])  # warm-up
                rates = []
                for _ in range(args.repeats):
                    tokens, seconds = _send_prompts(server, prompts)
                    rates.append(round(tokens / seconds, 2))
                rows.append(
                    {
                        "k": k,
                        "tok_s": rates,
                        "mean": round(statistics.fmean(rates), 2),
                        "stdev": round(statistics.stdev(rates), 2) if len(rates) > 1 else None,
                    }
                )
        finally:
            pool.stop()
    return {"prompts": len(prompts), "repeats": args.repeats, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="time a fresh lab models build")
    acceptance = sub.add_parser("acceptance", help="trained vs guessed-config drafter at k")
    acceptance.add_argument("--k", type=int, default=4)
    sweep = sub.add_parser("k-sweep", help="output tok/s per k with repeats")
    sweep.add_argument("--ks", default="1,2,3,4")
    sweep.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    run = {"build": cmd_build, "acceptance": cmd_acceptance, "k-sweep": cmd_k_sweep}
    result = {
        "benchmark": f"lab_drafter {args.command}",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        **run[args.command](args),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with RESULTS.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(result) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
