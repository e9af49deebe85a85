"""Run the bundled server's preflight on a real GPU machine and print its report.

`python benchmarks/gpu_preflight.py OUT_DIR` writes, for TP=1 and for TP=(GPUs + 1), a server
spec naming the Qwen3.6-27B-shaped fixture target and its corrected DFlash drafter (header-only
weights: nothing is loaded), runs `python -m dflashops.server --spec … --preflight-only`, and
saves each report and exit code. The TP=1 run must pass the GPU checks (count, free memory,
peer access); the oversized TP must fail in seconds with one line and exit 14, before any engine.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "drafter"


def gpu_count() -> int:
    try:
        import torch

        return int(torch.cuda.device_count())
    except ImportError:
        return 0


def run(out: Path, tp: int) -> dict[str, object]:
    target = out / "target"
    if not target.exists():
        shutil.copytree(FIXTURES / "qwen36-27b-target", target)
        # the preflight wants weights present; a header-only shard stands in (never loaded)
        shutil.copy(
            FIXTURES / "qwen36-27b-dflash-guessed" / "model.safetensors",
            target / "model.safetensors",
        )
    spec = {
        "engine": "vllm",
        "engine_version": "0.34.0",
        "argv": ["true"],
        "model": str(target),
        "drafter": str(FIXTURES / "qwen36-27b-dflash-corrected"),
        "method": "dflash",
        "num_speculative_tokens": 6,
        "tensor_parallel_size": tp,
        "expect_cuda": True,
        "min_shm_bytes": 1 << 30,
        "preflight_report": str(out / f"preflight-tp{tp}.json"),
    }
    spec_path = out / f"spec-tp{tp}.json"
    spec_path.write_text(json.dumps(spec, indent=2))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "dflashops.server", "--spec", str(spec_path), "--preflight-only"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    return {
        "tp": tp,
        "exit_code": done.returncode,
        "seconds": round(time.monotonic() - started, 2),
        "stdout": done.stdout[-4000:],
        "stderr": done.stderr[-2000:],
    }


def main() -> int:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "preflight-out")
    out.mkdir(parents=True, exist_ok=True)
    gpus = gpu_count()
    results = [run(out, 1), run(out, gpus + 1)]
    (out / "results.json").write_text(json.dumps({"gpus": gpus, "runs": results}, indent=2))
    print(json.dumps({"gpus": gpus, "runs": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
