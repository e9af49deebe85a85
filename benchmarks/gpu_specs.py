"""Render the server specs of the issue-22 GPU run (here, before any device time is spent).

`python benchmarks/gpu_specs.py [--set h200|tp2|h200b] [--models DIR] [OUT_DIR]` loads the H200
playbooks in ``benchmarks/results/gpu-h200-playbooks/`` and renders, through ``launch``'s own
renderer (:func:`dflashops.launch.render.build_spec`), one ``python -m dflashops.server`` spec per
run: the Qwen3-8B-shaped target at k = 0, 1, 2, 4, 8, 15 and the lab's tiny target with its trained
drafter; with ``--set tp2`` the 27B shape at TP=1 and TP=2 (issue 23) from
``benchmarks/results/gpu-h200x2-playbooks/``; with ``--set h200b`` the second H200 session: the
bench-against-client agreement runs again (``gpu_run.py --agree-rounds``) and Qwen3.6-27B's own
hybrid architecture with the corrected and the guessed drafter config
(``benchmarks/results/gpu-h200-27b-playbooks/``). ``--models DIR`` (the model folders made here,
``gpu_dense27.py``'s) checks each DFlash drafter as ``launch`` does before rendering, so a spec
carries the environment the check requires and the target's hybrid facts. Paths in the specs
are the GPU host's (``/root/gpu/...``; the engine comes from the payload through ``PYTHONPATH``,
so ``argv[0]`` is the host's ``python3``).

Two edits after rendering, both recorded in each spec file's sibling ``runs.json``:
- the report and pid files go under ``/root/gpu/state/<run>/`` (no ``/var/lib/dflashops``
  there);
- the synthetic-acceptance runs add vLLM 0.26's ``rejection_sample_method: synthetic`` and
  ``synthetic_acceptance_rates`` to ``--speculative-config`` (a benchmarking knob a playbook has
  no field for): the incident's per-position curve, cut at k.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import parse_engine
from dflashops.launch.args import TargetFacts, hybrid_from_config
from dflashops.launch.render import RenderInputs, build_spec
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook

REPO = Path(__file__).resolve().parents[1]
PLAYBOOKS = REPO / "benchmarks" / "results" / "gpu-h200-playbooks"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu-h200-specs"
STATE = "/root/gpu/state"

# The incident's per-position (unconditional) acceptance: 0.80, 0.53, 0.32, 0.22, then falling
# (the tail the tune tests use, continued to 15 positions; vLLM wants it non-increasing).
INCIDENT_RATES = (
    0.80, 0.53, 0.32, 0.22, 0.15, 0.10, 0.07, 0.05, 0.03, 0.02, 0.01, 0.005, 0.003, 0.002, 0.001,
)  # fmt: skip

# run name -> (playbook file, k (0: no speculation), synthetic acceptance?)
Runs = dict[str, tuple[str, int, bool]]
RUNS: Runs = {
    "q8b-k4": ("qwen3-8b-dflash.yaml", 4, True),
    "q8b-k0": ("qwen3-8b-dflash.yaml", 0, False),
    "q8b-k15": ("qwen3-8b-dflash.yaml", 15, True),
    "q8b-k8": ("qwen3-8b-dflash.yaml", 8, True),
    "q8b-k2": ("qwen3-8b-dflash.yaml", 2, True),
    "q8b-k1": ("qwen3-8b-dflash.yaml", 1, True),
    "tiny-k4": ("tiny-qwen3-dflash.yaml", 4, False),
    "tiny-k2": ("tiny-qwen3-dflash.yaml", 2, False),
    "tiny-k1": ("tiny-qwen3-dflash.yaml", 1, False),
}
# Issue 23 (and issue 22's guessed config), for a two-GPU host: the 27B shape at TP=1 and TP=2
# side by side, most telling first (a lease may end before the last); the guessed run keeps
# what vLLM itself does with that config (preflight's drafter check is skipped, as --force does)
TP2_RUNS: Runs = {
    "q27-tp2-k0": ("qwen3-27b-dflash-tp2.yaml", 0, False),
    "q27-tp1-k0": ("qwen3-27b-dflash-tp1.yaml", 0, False),
    "q27-tp2-k4": ("qwen3-27b-dflash-tp2.yaml", 4, True),
    "q27-tp1-k4": ("qwen3-27b-dflash-tp1.yaml", 4, True),
    "q27-guessed-k4": ("qwen3-27b-dflash-guessed.yaml", 4, False),
    "q27-tp2-k15": ("qwen3-27b-dflash-tp2.yaml", 15, True),
    "q27-tp1-k15": ("qwen3-27b-dflash-tp1.yaml", 15, True),
}
# The second H200 session (issue 22): the agreement reruns first, then Qwen3.6-27B's hybrid
# architecture: the product's verdict on the guessed config (preflight only), what vLLM itself does
# with it (the drafter check skipped, as --force does), the corrected config with the incident's
# curve, and plain decode for the roofline. Playbook paths are relative to benchmarks/results.
H200B_RUNS: Runs = {
    "q8b-k4": ("gpu-h200-playbooks/qwen3-8b-dflash.yaml", 4, True),
    "q27h-guessed-pf": ("gpu-h200-27b-playbooks/qwen36-27b-dflash-guessed.yaml", 4, False),
    "q27h-guessed-k4": ("gpu-h200-27b-playbooks/qwen36-27b-dflash-guessed.yaml", 4, False),
    "q27h-k4": ("gpu-h200-27b-playbooks/qwen36-27b-dflash.yaml", 4, True),
    "q27h-k0": ("gpu-h200-27b-playbooks/qwen36-27b-dflash.yaml", 0, False),
    "tiny-k4": ("gpu-h200-playbooks/tiny-qwen3-dflash.yaml", 4, False),
}
# --set NAME -> (playbooks folder, runs, default output folder)
SETS: dict[str, tuple[Path, Runs, Path]] = {
    "h200": (PLAYBOOKS, RUNS, DEFAULT_OUT),
    "tp2": (
        REPO / "benchmarks" / "results" / "gpu-h200x2-playbooks",
        TP2_RUNS,
        REPO / "benchmarks" / "results" / "gpu-h200x2-specs",
    ),
    "h200b": (
        REPO / "benchmarks" / "results",
        H200B_RUNS,
        REPO / "benchmarks" / "results" / "gpu-h200b-specs",
    ),
}
GPU_ROOT = "/root/gpu"


def playbook_at_k(path: Path, k: int) -> Playbook:
    base = load_playbook(path)
    if k == 0:
        return base.model_copy(
            update={
                "drafter": base.drafter.model_copy(update={"method": "none", "model": None}),
                "server": base.server.model_copy(update={"num_speculative_tokens": None}),
            }
        )
    return load_playbook(path, [f"server.num_speculative_tokens={k}"])


def with_synthetic(argv: list[str], rates: list[float]) -> list[str]:
    """argv with the synthetic rejection sampler added to its --speculative-config JSON."""
    out = list(argv)
    at = out.index("--speculative-config") + 1
    config = json.loads(out[at])
    config.update(rejection_sample_method="synthetic", synthetic_acceptance_rates=rates)
    out[at] = json.dumps(config, sort_keys=True, separators=(",", ":"))
    return out


def local_check(playbook: Playbook, models: Path) -> tuple[dict[str, str], TargetFacts]:
    """What launch's drafter check gives the renderer, from the local copies of the GPU host's
    model folders (``/root/gpu/NAME`` is ``models/NAME`` here)."""

    def here(path: Path) -> Path:
        return models / path.relative_to(GPU_ROOT)

    config = json.loads((here(playbook.model.path) / "config.json").read_text(encoding="utf-8"))
    target = TargetFacts(hybrid_linear_attention=hybrid_from_config(config))
    drafter = playbook.drafter
    if drafter.method != "dflash" or drafter.model is None:
        return {}, target
    run = check_paths(
        str(here(drafter.model.path)),
        target=str(here(playbook.model.path)),
        ref=drafter.ref,
        engine=parse_engine(f"{playbook.engine.name}=={playbook.engine.version}"),
        k=playbook.server.num_speculative_tokens,
    )
    return dict(run.result.required_env), target


def render_run(
    name: str, which: str = "h200", models: Path | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    folder, runs, _ = SETS[which]
    book, k, synthetic = runs[name]
    playbook = playbook_at_k(folder / book, k)
    required_env, target = local_check(playbook, models) if models else ({}, TargetFacts())
    inputs = RenderInputs(
        supervisor="fallback",
        venv_python="python3",
        # the guessed config runs to see what vLLM itself does with it; its "-pf" twin keeps the
        # check, to record the product's own verdict on the GPU host
        skip_drafter_validation="guessed" in name and not name.endswith("-pf"),
        required_env=required_env,
        target=target,
    )
    spec = build_spec(playbook, inputs)
    spec = replace(
        spec,
        preflight_report=f"{STATE}/{name}/preflight.json",
        pidfile=f"{STATE}/{name}/server.pid",
    )
    rates = list(INCIDENT_RATES[:k]) if synthetic else None
    if rates:
        spec = replace(spec, argv=with_synthetic(spec.argv, rates))
    meta = {
        "run": name,
        "playbook": str((folder / book).relative_to(REPO)),
        "tensor_parallel_size": playbook.server.tensor_parallel_size,
        "k": k,
        "synthetic_acceptance_rates": rates,
        "port": playbook.server.port,
        "served_name": playbook.served_name,
        "model": str(playbook.model.path),
    }
    return spec.to_dict(), meta


def main() -> int:
    args = sys.argv[1:]
    which = "h200"
    models = None
    while args[:1] and args[0] in ("--set", "--models"):
        if args[0] == "--set":
            which = args[1]
        else:
            models = Path(args[1])
        args = args[2:]
    _, runs_of_set, default_out = SETS[which]
    out = Path(args[0]) if args else default_out
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for name in runs_of_set:
        spec, meta = render_run(name, which, models)
        (out / f"{name}.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        runs.append(meta)
    (out / "runs.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n", encoding="utf-8")
    print(f"{len(runs)} specs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
