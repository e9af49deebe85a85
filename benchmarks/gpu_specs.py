"""Render the server specs of the issue-22 GPU run (here, before any device time is spent).

`python benchmarks/gpu_specs.py [OUT_DIR]` loads the H200 playbooks in
``benchmarks/results/gpu-h200-playbooks/`` and renders, through ``launch``'s own renderer
(:func:`dflashops.launch.render.build_spec`), one ``python -m dflashops.server`` spec per run:
the Qwen3-8B-shaped target at k = 0, 1, 2, 4, 8, 15 and the lab's tiny target with its trained
drafter. Paths in the specs are the GPU host's (``/root/gpu/...``; the engine comes from the
payload through ``PYTHONPATH``, so ``argv[0]`` is the host's ``python3``).

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
RUNS: dict[str, tuple[str, int, bool]] = {
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


def render_run(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    book, k, synthetic = RUNS[name]
    playbook = playbook_at_k(PLAYBOOKS / book, k)
    spec = build_spec(playbook, RenderInputs(supervisor="fallback", venv_python="python3"))
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
        "playbook": f"benchmarks/results/gpu-h200-playbooks/{book}",
        "k": k,
        "synthetic_acceptance_rates": rates,
        "port": playbook.server.port,
        "served_name": playbook.served_name,
        "model": str(playbook.model.path),
    }
    return spec.to_dict(), meta


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for name in RUNS:
        spec, meta = render_run(name)
        (out / f"{name}.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        runs.append(meta)
    (out / "runs.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n", encoding="utf-8")
    print(f"{len(runs)} specs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
