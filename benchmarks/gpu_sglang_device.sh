#!/usr/bin/env bash
# The H200 side of benchmarks/gpu_sglang_pack.sh (issue 37): receive the chunks, unpack SGLang
# 0.5.15 into /root/gpu/site, check it before any server start. Files last only while the machine
# stays up: run the calls of benchmarks/gpu_sglang_plan.md back to back.
#
#   gpu_sglang_device.sh recv core|fa3 PART [first]   append PART to /root/gpu/<core|fa3>.blob
#   gpu_sglang_device.sh unpack core|fa3 SHA256FILE   check the blob, unpack into /root/gpu/site
#   gpu_sglang_device.sh models MODELS_TAR_XZ WHEELS  model folders + workloads; dflashops wheels
#                                                     into /root/gpu/extra; facts for gpu_run.py
#   gpu_sglang_device.sh probe                        versions, toolchain, imports, one JIT
#                                                     kernel and (once unpacked) FA3 against torch
set -euo pipefail
R=${GPU_RUN_ROOT:-/root/gpu}  # another root: a dry run off the GPU (as gpu_run.py)
mkdir -p "$R/state"
export PYTHONPATH=$R/extra:$R/site PYTHONUNBUFFERED=1 SGLANG_IS_FLASHINFER_AVAILABLE=false
export TVM_FFI_CACHE_DIR=$R/tvm-ffi NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
case "$1" in
recv)
  [[ ${4:-} == first ]] && : > "$R/$2.blob"
  cat "$3" >> "$R/$2.blob"
  echo "$2.blob now $(stat -c %s "$R/$2.blob") bytes" ;;
unpack)
  got=$(sha256sum "$R/$2.blob" | cut -c1-64)
  [[ $got == "$(cut -c1-64 "$3")" ]] || { echo "$2: sha256 mismatch: $got"; exit 3; }
  [[ $2 == core ]] && rm -rf "$R/site"
  mkdir -p "$R/site"
  t=$(date +%s.%N)
  xz -dc -T0 "$R/$2.blob" | tar -C "$R/site" -xf -
  echo "$2 unpacked in $(python3 -c "print(round($(date +%s.%N) - $t, 1))") s: $(du -sh "$R/site" | cut -f1)"
  if [[ $2 == core ]]; then
    # sgl_kernel 0.4.4 hands bf16 RMSNorm to flashinfer.norm, whose JIT sources (flashinfer/data)
    # stay home: the first H200 server died building norm.cu. sgl_kernel's own compiled
    # rmsnorm/fused_add_rmsnorm (sm90/common_ops) is its fallback when flashinfer is absent.
    sed -i 's/^    _has_flashinfer = True$/    _has_flashinfer = False/' "$R/site/sgl_kernel/elementwise.py"
    grep -n '_has_flashinfer = ' "$R/site/sgl_kernel/elementwise.py"
    # EAGLE-3's draft CUDA-graph capture imports the DeepSeek sparse-attention backend only to
    # list it among the graph-capable backends; that import needs `cutlass` (nvidia-cutlass-dsl,
    # 153 MB of wheels, not carried): every EAGLE-3 server died on it on the H100 (2026-12-05).
    # A target without DSA never uses that backend, so a failed import just leaves it off the list.
    python3 - "$R/site/sglang/srt/speculative/eagle_worker_v2.py" <<'PY'
import sys
path = sys.argv[1]
text = open(path).read()
old = """            from sglang.srt.layers.attention.dsa_backend import (
                DeepseekSparseAttnBackend,
            )

            graph_supported_backend_types.append(DeepseekSparseAttnBackend)
"""
new = """            try:
                from sglang.srt.layers.attention.dsa_backend import (
                    DeepseekSparseAttnBackend,
                )
            except ImportError:  # dflashops' payload: no cutlass DSL, no DSA model
                pass
            else:
                graph_supported_backend_types.append(DeepseekSparseAttnBackend)
"""
if old in text:
    open(path, "w").write(text.replace(old, new))
    print("eagle_worker_v2: the DSA backend import tolerates a missing cutlass")
else:
    print("eagle_worker_v2: DSA import not found as expected; left as it is")
PY
  fi ;;
models)
  tar -C "$R" -xJf "$2"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$R/extra" "$3"/*.whl
  python3 - <<'PY'
import json, os, subprocess, sys
def sh(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except OSError as exc:
        return str(exc)
facts = {
    "nvidia_smi": sh("nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                     "clocks.max.mem", "--format=csv"),
    "python": sys.version,
    "versions": sh(sys.executable, "-c", "import importlib.metadata as m; print({n: m.version(n) "
                   "for n in ('torch', 'sglang', 'sglang-kernel', 'flashinfer-python', "
                   "'transformers', 'tokenizers', 'triton', 'apache-tvm-ffi', 'dflashops')})"),
    "nvcc": sh("nvcc", "--version").splitlines()[-1:],
    "kernel": sh("uname", "-r"),
}
open(os.environ.get("GPU_RUN_ROOT", "/root/gpu") + "/state/facts.json", "w").write(json.dumps(facts, indent=2))
print(json.dumps(facts, indent=2))
PY
  ;;
probe)
  for tool in nvcc g++ c++ ninja; do echo "$tool: $(command -v $tool || echo MISSING)"; done
  python3 - <<'PY'
import time
t0 = time.time()
import torch
import sgl_kernel  # loads sgl_kernel/sm90/common_ops.abi3.so on compute capability 9.0
import flashinfer.sampling  # sglang/srt/layers/sampler.py:29 imports it on CUDA
import sglang.srt.entrypoints.http_server  # noqa: F401
import sglang.srt.model_executor.model_runner  # noqa: F401
import sglang.srt.speculative.dflash_worker_v2  # noqa: F401
import sglang.srt.speculative.eagle_worker_v2  # noqa: F401
print(f"imports ok in {time.time() - t0:.1f} s; torch {torch.__version__},"
      f" {torch.cuda.get_device_name(0)}, sgl_kernel {sgl_kernel.__version__}")
from sglang.jit_kernel.activation import silu_and_mul
x = torch.randn(8, 2 * 12288, device="cuda", dtype=torch.bfloat16)
t0 = time.time()
got = silu_and_mul(x)
torch.cuda.synchronize()
ref = torch.nn.functional.silu(x[:, :12288].float()) * x[:, 12288:].float()
err = ((got.float() - ref).norm() / ref.norm()).item()
print(f"JIT silu_and_mul: first call {time.time() - t0:.1f} s (nvcc), rel err {err:.1e}")
try:
    from sgl_kernel.flash_attn import flash_attn_varlen_func
except ImportError as exc:
    print("FA3: not unpacked yet:", exc)
else:
    q, k, v = (torch.randn(256, h, 128, device="cuda", dtype=torch.bfloat16) for h in (32, 8, 8))
    cu = torch.tensor([0, 256], device="cuda", dtype=torch.int32)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 256, 256, causal=True)
    out = out[0] if isinstance(out, tuple) else out
    kr, vr = (t.repeat_interleave(4, dim=1).transpose(0, 1).float() for t in (k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1).float(), kr, vr, is_causal=True).transpose(0, 1)
    print(f"FA3 varlen vs sdpa: rel err {((out.float() - ref).norm() / ref.norm()).item():.1e}")
PY
  ;;
*) echo "usage: $0 recv|unpack|models|probe ..."; exit 2 ;;
esac
