"""Does a real SGLang build the lab's speculators-layout DFlash drafter from dflashops' z-lab view?

SGLang runs DFLASH on CUDA only ("DFLASH speculative decoding only supports CUDA device.", a real
0.5.16 CPU server), so no server can draft with it here. This checks the two steps before that,
with SGLang's own code in its venv: transformers' ``AutoConfig`` through SGLang's ``get_config``
and ``parse_dflash_draft_config`` on the drafter folder as it is and on the view
(``dflashops.server.drafter_view.write_view``, what the bundled server writes before exec), and
SGLang's ``DFlashDraftModel`` built from the view with every tensor of the drafter's
``model.safetensors`` loaded and compared with the file (q/k/v and gate/up stacked by SGLang)::

    .venv/bin/python benchmarks/sglang_view_check.py \
        --python ~/.cache/dflashops/lab/venv-sglang-cpu-0.5.16/bin/python

Seen here (SGLang 0.5.16, 2026-12-05): the folder as it is: "Unrecognized model"; the view:
Qwen3Config, target_layer_ids [0, 1, 2], mask id 3, block 5; the model built, all 14 tensors
equal in its 11 parameters. Without ``num_target_layers`` in the view the model refused the ids
("out-of-range layer id ... target_num_layers=1": the drafter's own layer count is the bound).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from dflashops.server.drafter_view import write_view

LAB_MODELS = Path.home() / ".cache" / "dflashops" / "lab" / "models"
PROBE = r"""
import json, os, sys
os.environ["SGLANG_USE_CPU_ENGINE"] = "1"
import torch
from safetensors.torch import load_file
from sglang.srt.distributed import init_distributed_environment, initialize_model_parallel
from sglang.srt.server_args import ServerArgs, set_global_server_args_for_scheduler
from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config
from sglang.srt.utils.hf_transformers_utils import get_config

original, view, target = sys.argv[1:4]
out = {}
try:
    get_config(original, trust_remote_code=False)
    out["original"] = "loaded"
except ValueError as exc:
    out["original"] = str(exc).splitlines()[0]
cfg = get_config(view, trust_remote_code=False)
parsed = parse_dflash_draft_config(draft_hf_config=cfg)
out["view"] = {
    "config": type(cfg).__name__,
    "target_layer_ids": parsed.target_layer_ids,
    "mask_token_id": parsed.mask_token_id,
    "block_size": parsed.block_size,
}
init_distributed_environment(world_size=1, rank=0, local_rank=0,
                             distributed_init_method="tcp://127.0.0.1:29533", backend="gloo")
initialize_model_parallel(1, 1)
set_global_server_args_for_scheduler(ServerArgs(model_path=target, device="cpu"))
from sglang.srt.models.dflash import DFlashDraftModel
torch.set_default_dtype(torch.bfloat16)
model = DFlashDraftModel(config=cfg)
tensors = load_file(os.path.join(view, "model.safetensors"))
model.load_weights(list(tensors.items()))
params = dict(model.named_parameters())
stacked = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
equal = 0
for name, param in params.items():
    parts = None
    for fused, pieces in stacked.items():
        if f".{fused}." in name:
            parts = [tensors[name.replace(fused, p)] for p in pieces]
    wanted = torch.cat(parts) if parts else tensors[name]
    equal += sum(1 for _ in (parts or [wanted])) if torch.equal(param.data, wanted) else 0
out["model"] = {"parameters": len(params), "tensors": len(tensors), "tensors_equal": equal}
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", type=Path, required=True, help="the SGLang venv's python")
    parser.add_argument("--drafter", type=Path, default=LAB_MODELS / "tiny-qwen3-dflash")
    parser.add_argument("--target", type=Path, default=LAB_MODELS / "tiny-qwen3")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dflashops-view-") as tmp:
        view = Path(tmp) / "drafter-zlab"
        print(write_view(args.drafter, view, args.target), file=sys.stderr)
        run = subprocess.run(
            [str(args.python), "-c", PROBE, str(args.drafter), str(view), str(args.target)],
            capture_output=True,
            text=True,
            check=False,
        )
    if run.returncode != 0:
        print(run.stderr[-4000:], file=sys.stderr)
        return run.returncode
    result = json.loads(run.stdout.strip().splitlines()[-1])
    print(json.dumps(result, indent=1))
    model = result["model"]
    return 0 if model["tensors_equal"] == model["tensors"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
