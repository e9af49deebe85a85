"""Render issue 37's SGLang server specs for the H200 (here, before any device time is spent).

``python benchmarks/gpu_sglang_specs.py [--models DIR] [OUT_DIR]`` loads the SGLang playbooks in
``benchmarks/results/gpu-h200-sglang-playbooks/`` (SGLang 0.5.15, the Qwen3-8B shape, dummy
weights) and renders, through ``launch``'s own renderer
(:func:`dflashops.launch.render.build_spec`), one ``python -m dflashops.server`` spec per run into
``benchmarks/results/gpu-h200-sglang-specs``
with a ``runs.json`` that ``benchmarks/gpu_run.py --specs`` reads. The run names keep
``gpu_run.py``'s: ``q8b-k0`` and ``q8b-k4`` (DFlash) get ``dflashops bench`` next to the
independent client.

``--models DIR`` (the device's ``/root/gpu`` folders made here: ``target``, ``drafter`` and the
``eagle3`` folder that ``--make-eagle3 DIR`` writes from ``DIR/target``) runs launch's drafter
check as SGLang 0.5.15 reads each drafter and prints its findings; the environment it requires
goes into the spec, as ``launch`` does.

Runs (most telling first; a call that runs out of time resumes at the next):
- ``q8b-t-k0``, ``q8b-t-k4``: triton attention, so the first call can serve before the FA3
  chunks arrive (and the FA3 step cost has a same-engine reference);
- ``q8b-k0``: plain decode, FA3; ``q8b-k1/2/4/8``: DFlash, k drafts = a verify window of k + 1
  (``--speculative-num-draft-tokens``); ``e3-k1/2/4/8``: EAGLE-3, k steps, topk 1;
- ``e3-k4-sim3``: EAGLE-3 k=4 with ``SGLANG_SIMULATE_ACC_LEN=3`` (SGLang's synthetic acceptance,
  speculative/eagle_utils.py:730; DFLASH has no such switch in 0.5.15), vLLM's ``s4:3``;
- ``q8b-view-k4``: DFlash k=4 from ``drafter-speculators`` (the same drafter in the speculators
  layout, as ``drafter train`` exports; ``--make-speculators DIR`` writes it from ``DIR/drafter``),
  which launch serves SGLang through the z-lab view the bundled server writes before exec.
"""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine_matrix_eagle3

from dflashops.deployment.layout import Layout
from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.safetensors import header_bytes
from dflashops.launch.args import TargetFacts, hybrid_from_config
from dflashops.launch.render import RenderInputs, build_spec
from dflashops.playbook.load import load_playbook
from dflashops.playbook.models import Playbook
from tests.fixtures.drafter.speculators_layout import as_speculators

REPO = Path(__file__).resolve().parents[1]
PLAYBOOKS = REPO / "benchmarks" / "results" / "gpu-h200-sglang-playbooks"
DEFAULT_OUT = REPO / "benchmarks" / "results" / "gpu-h200-sglang-specs"
GPU_ROOT = "/root/gpu"
STATE = f"{GPU_ROOT}/state"
DFLASH, EAGLE3 = "qwen3-8b-dflash.yaml", "qwen3-8b-eagle3.yaml"
# the capture ids the EAGLE-3 drafter names (SGLang and vLLM both capture id + 1: layers 2, 18,
# 33, SGLang's own default for a 36-layer Qwen3, models/qwen3.py:689-702)
EAGLE3_LAYERS = [1, 17, 32]

# run name -> (playbook, k (0: no speculation), attention backend, extra environment)
Runs = dict[str, tuple[str, int, str, dict[str, str]]]
RUNS: Runs = {
    "q8b-t-k0": (DFLASH, 0, "triton", {}),
    "q8b-t-k4": (DFLASH, 4, "triton", {}),
    "q8b-k0": (DFLASH, 0, "fa3", {}),
    "q8b-k4": (DFLASH, 4, "fa3", {}),
    "q8b-k1": (DFLASH, 1, "fa3", {}),
    "q8b-k2": (DFLASH, 2, "fa3", {}),
    "q8b-k8": (DFLASH, 8, "fa3", {}),
    "e3-k4": (EAGLE3, 4, "fa3", {}),
    "e3-k1": (EAGLE3, 1, "fa3", {}),
    "e3-k2": (EAGLE3, 2, "fa3", {}),
    "e3-k8": (EAGLE3, 8, "fa3", {}),
    "e3-k4-sim3": (EAGLE3, 4, "fa3", {"SGLANG_SIMULATE_ACC_LEN": "3"}),
    "q8b-view-k4": (DFLASH, 4, "fa3", {}),
}
# runs whose drafter is the speculators-layout copy, served to SGLang through the z-lab view
SPECULATORS_DRAFTER = f"{GPU_ROOT}/drafter-speculators"
VIEW_RUNS = frozenset({"q8b-view-k4"})


def playbook_for(book: str, k: int, backend: str, env: dict[str, str]) -> Playbook:
    sets = [f"server.attention_backend={backend}"]
    sets += [f"server.env.{key}={value}" for key, value in env.items()]
    if k:
        return load_playbook(PLAYBOOKS / book, [*sets, f"server.num_speculative_tokens={k}"])
    base = load_playbook(PLAYBOOKS / book, sets)
    return base.model_copy(
        update={
            "drafter": base.drafter.model_copy(update={"method": "none", "model": None}),
            "server": base.server.model_copy(update={"num_speculative_tokens": None}),
        }
    )


def drafter_check(playbook: Playbook, models: Path) -> tuple[dict[str, str], TargetFacts, str]:
    """Launch's drafter check on the local copies of the device's folders (``/root/gpu/NAME`` is
    ``models/NAME`` here), as SGLang 0.5.15 reads the drafter."""

    def here(path: Path) -> Path:
        return models / path.relative_to(GPU_ROOT)

    config = json.loads((here(playbook.model.path) / "config.json").read_text(encoding="utf-8"))
    target = TargetFacts(hybrid_linear_attention=hybrid_from_config(config))
    drafter = playbook.drafter
    if drafter.model is None:
        return {}, target, ""
    run = check_paths(
        str(here(drafter.model.path)),
        target=str(here(playbook.model.path)),
        engine=parse_engine(f"{playbook.engine.name}=={playbook.engine.version}"),
        k=playbook.server.num_speculative_tokens,
        method=drafter.method,
    )
    found = "; ".join(
        f"{f.severity} {f.key}: {f.found} (want {f.expected})" for f in run.result.findings
    )
    return dict(run.result.required_env), target, f"{run.result.summary.status}: {found}"


def render_run(name: str, models: Path | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    book, k, backend, env = RUNS[name]
    playbook = playbook_for(book, k, backend, env)
    view = name in VIEW_RUNS
    if view:
        assert playbook.drafter.model is not None
        model = playbook.drafter.model.model_copy(update={"path": Path(SPECULATORS_DRAFTER)})
        drafter = playbook.drafter.model_copy(update={"model": model, "ref": None})
        playbook = playbook.model_copy(update={"drafter": drafter})
    required_env: dict[str, str] = {}
    target, verdict = TargetFacts(), ""
    if models is not None:
        required_env, target, verdict = drafter_check(playbook, models)
    inputs = RenderInputs(
        supervisor="fallback",
        venv_python="python3",
        required_env=required_env,
        target=target,
        layout=Layout(state=STATE),  # the view goes to /root/gpu/state/drafter-zlab
        zlab_view=view,  # the drafter check's engine.layout note says so (launch reads it)
    )
    spec = build_spec(playbook, inputs)
    spec = replace(
        spec,
        preflight_report=f"{STATE}/{name}/preflight.json",
        pidfile=f"{STATE}/{name}/server.pid",
    )
    meta = {
        "run": name,
        "playbook": str((PLAYBOOKS / book).relative_to(REPO)),
        "method": playbook.drafter.method,
        "attention_backend": backend,
        "tensor_parallel_size": playbook.server.tensor_parallel_size,
        "k": k,
        "env": env,
        "port": playbook.server.port,
        "served_name": playbook.served_name,
        "model": str(playbook.model.path),
        "drafter_check": verdict,
    }
    return spec.to_dict(), meta


def make_eagle3(models: Path) -> Path:
    """``models/eagle3``: an EAGLE-3 drafter of the target's shape, header-only weights (the
    server runs it with --load-format dummy), the capture ids where both engines read them."""
    target = json.loads((models / "target" / "config.json").read_text(encoding="utf-8"))
    config = engine_matrix_eagle3.eagle3_config(target)
    config["torch_dtype"] = "bfloat16"
    config["eagle_aux_hidden_state_layer_ids"] = EAGLE3_LAYERS  # vLLM reads this one
    config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": EAGLE3_LAYERS}  # SGLang this
    out = models / "eagle3"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    shapes = engine_matrix_eagle3.tensor_shapes(config)
    tensors = {name: ("BF16", tuple(shape)) for name, (_, shape) in shapes.items()}
    (out / "model.safetensors").write_bytes(header_bytes(tensors))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if (models / "target" / name).is_file():
            shutil.copy(models / "target" / name, out / name)
    return out


def make_speculators(models: Path) -> Path:
    """``models/drafter-speculators``: ``models/drafter`` with its config in the speculators
    layout (what ``drafter train`` exports); the weights and tokenizer files are copied."""
    source, out = models / "drafter", models / "drafter-speculators"
    out.mkdir(parents=True, exist_ok=True)
    zlab = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config = as_speculators(zlab, verifier=f"{GPU_ROOT}/target")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    for item in source.iterdir():
        if item.name != "config.json":
            shutil.copy(item, out / item.name)
    return out


def main() -> int:
    args = sys.argv[1:]
    models = None
    while args[:1] and args[0] in ("--models", "--make-eagle3", "--make-speculators"):
        if args[0] == "--make-eagle3":
            print("wrote", make_eagle3(Path(args[1])))
            return 0
        if args[0] == "--make-speculators":
            print("wrote", make_speculators(Path(args[1])))
            return 0
        models = Path(args[1])
        args = args[2:]
    out = Path(args[0]) if args else DEFAULT_OUT
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    for name in RUNS:
        spec, meta = render_run(name, models)
        (out / f"{name}.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
        runs.append(meta)
        if meta["drafter_check"]:
            print(f"{name}: drafter check {meta['drafter_check']}")
    (out / "runs.json").write_text(json.dumps({"runs": runs}, indent=2) + "\n", encoding="utf-8")
    print(f"{len(runs)} specs in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
