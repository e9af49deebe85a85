"""Build an SGLang CPU runtime for the lab (issue 37): a venv with SGLang and its CPU kernels.

SGLang's CPU backend needs ``sgl-kernel`` built from the SGLang repository's CPU sources
(``sgl-kernel/csrc/cpu``, packaged by ``sgl-kernel/pyproject_cpu.toml`` as
``sglang-kernel-cpu``); no package registry ships it. This recipe takes a checkout of those
sources (``git clone --branch v0.5.16 https://github.com/sgl-project/sglang SRC``) and makes
``~/.cache/dflashops/lab/venv-sglang-cpu-VERSION``::

    .venv/bin/python benchmarks/sglang_cpu_build.py --src SRC --version 0.5.16

Steps (each timed; the times seen here, 2 cores of a Xeon with AMX, are in ``STEP_TIMES``):

1. ``venv``: ``python -m venv`` with the base interpreter the lab's vLLM venvs use.
2. ``deps``: the CPU dependency list of ``SRC/python/pyproject_cpu.toml`` with torch replaced
   by ``--torch`` (default ``torch==2.13.0+cpu``: PyPI's CPU wheels are not on the plain index,
   ``--torch-index`` adds one, e.g. https://download.pytorch.org/whl/cpu) and torchaudio
   dropped (nothing the text server runs imports it); torchvision and triton follow torch.
3. ``sglang``: PyPI's ``sglang==VERSION`` wheel with ``--no-deps`` (its own requirements are
   the CUDA ones: flashinfer, sglang-kernel, cutlass, ...).
4. ``kernel``: ``SRC/sgl-kernel`` copied to a scratch folder, ``pyproject_cpu.toml`` made its
   ``pyproject.toml``, ``pip install --no-build-isolation`` (scikit-build-core + CMake on
   ``csrc/cpu``; ``-march=x86-64-v4`` with AVX-512 BF16/VNNI and AMX). It needs ``numa.h``
   and ``libnuma``: when the system has no ``libnuma-dev`` the recipe unpacks that Debian
   package into the scratch folder (``apt-get download`` + ``dpkg -x``; nothing is
   installed system-wide) and points CMake at it.
5. ``verify``: ``python -c "import sgl_kernel; import sglang"`` and the CPU ops library's
   ``torch.ops.sgl_kernel`` namespace.

At serve time SGLang's n-gram speculation compiles a C++ corpus at first use (its JIT
``ngram_corpus`` sources); with g++ 12 those miss ``<cstddef>``, so the recipe writes
``VENV/bin/cxx-include-cstddef`` and a ``sitecustomize.py`` that makes it ``CXX`` (when unset)
for every interpreter run from the venv, a lab container's thin venv over it included.
``SGLANG_USE_CPU_ENGINE=1`` is the product's (``server.device: cpu``).

The runtime used for the fixtures and RESULTS.md (2026-12-05) was built from an SGLang source
snapshot of 2026-07-20 (the closest to the 0.5.16 wheel of 07-25 that could be had here: the
kernel ops Qwen3 calls are all in it), not from the v0.5.16 tag.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

LAB = Path.home() / ".cache" / "dflashops" / "lab"
BASE_PYTHON = Path.home() / ".pyenv" / "versions" / "3.11.7" / "bin" / "python"
# seen on this machine (2 cores, Xeon with AMX), SGLang 0.5.16, torch 2.13.0+cpu
# (a fresh venv on 2026-12-05, wheels in pip's cache; total 345 s)
STEP_TIMES = {"venv": 3.0, "deps": 90.1, "sglang": 5.8, "kernel": 241.9, "verify": 4.4}
DROPPED = ("torchaudio",)
FOLLOWS_TORCH = ("torchvision", "triton")
NUMA_HEADER = Path("/usr/include/numa.h")


def cpu_requirements(src: Path, torch: str) -> list[str]:
    """``SRC/python/pyproject_cpu.toml``'s dependencies, torch pinned to ``torch``."""
    data = tomllib.loads((src / "python" / "pyproject_cpu.toml").read_text(encoding="utf-8"))
    out = [torch]
    for requirement in data["project"]["dependencies"]:
        name = re.split(r"[ <>=!~;\[]", requirement, maxsplit=1)[0].lower()
        if name == "torch" or name in DROPPED:
            continue
        out.append(name if name in FOLLOWS_TORCH else requirement)
    return [*out, "scikit-build-core>=0.10", "wheel", "cmake"]


def step(name: str, times: dict[str, float], command: list[str], **kwargs: object) -> None:
    print(f"== {name}: {' '.join(command)}", flush=True)
    begun = time.monotonic()
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]
    times[name] = times.get(name, 0.0) + round(time.monotonic() - begun, 1)


TORCHVISION_REGISTRATIONS = """from torchvision import (
    _autograd_registrations,
    _meta_registrations,
    datasets,"""
TORCHVISION_GUARDED = """if extension._has_ops():  # dflashops lab: no ops (a CUDA build)
    from torchvision import _autograd_registrations, _meta_registrations  # usort:skip
from torchvision import (
    datasets,"""


def guard_torchvision(python: Path) -> bool:
    """Let PyPI's torchvision import on a CPU torch; True when its ``__init__`` was changed.

    PyPI's torchvision wheels are CUDA builds: with a CPU torch their ops library (``_C.so``,
    linked to ``libtorch_cuda.so``) does not load, and ``import torchvision`` then fails
    registering fake and autograd kernels for ops that do not exist (``operator
    torchvision::nms does not exist``). SGLang imports ``torchvision.io`` at start
    (``srt/utils/common.py``), so those registrations are skipped when the ops are missing; the
    text server calls no torchvision op.
    """
    probe = "import importlib.util; print(importlib.util.find_spec('torchvision').origin)"
    found = subprocess.run(
        [str(python), "-c", probe],
        check=True,
        capture_output=True,
        text=True,
    )
    init = Path(found.stdout.strip())
    text = init.read_text(encoding="utf-8")
    if TORCHVISION_REGISTRATIONS not in text:
        return False
    init.write_text(text.replace(TORCHVISION_REGISTRATIONS, TORCHVISION_GUARDED), encoding="utf-8")
    return True


CXX_WRAPPER = "cxx-include-cstddef"


def write_cxx_wrapper(venv: Path) -> Path:
    """``VENV/bin/cxx-include-cstddef``: ``c++ -include cstddef``, one executable for ``CXX``.

    SGLang compiles its n-gram corpus at first use (tvm-ffi, with ``$CXX``); with g++ 12 its
    ``result.h`` misses ``<cstddef>`` (``'size_t' has not been declared``). A ``CXX`` holding
    arguments would break torch inductor (``No working C++ compiler found``), hence a file.
    """
    wrapper = venv / "bin" / CXX_WRAPPER
    wrapper.write_text('#!/bin/sh\nexec c++ -include cstddef "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    return wrapper


def write_sitecustomize(python: Path) -> Path:
    """``sitecustomize.py`` in the venv: ``CXX`` defaults to the wrapper beside the interpreter
    that runs, so a server started from this venv (or a thin venv over it, as launch makes)
    compiles the n-gram corpus with no playbook setting, wherever the venv is mounted."""
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    found = subprocess.run([str(python), "-c", probe], check=True, capture_output=True, text=True)
    path = Path(found.stdout.strip()) / "sitecustomize.py"
    path.write_text(SITECUSTOMIZE, encoding="utf-8")
    return path


SITECUSTOMIZE = f"""# dflashops lab (sglang_cpu_build.py): the n-gram corpus JIT needs <cstddef>
import os as _os

_wrapper = _os.path.join(_os.path.dirname(__file__), "..", "..", "..", "bin", "{CXX_WRAPPER}")
if "CXX" not in _os.environ and _os.path.exists(_wrapper):
    _os.environ["CXX"] = _os.path.normpath(_wrapper)
del _os, _wrapper
"""


def numa_flags(scratch: Path) -> tuple[dict[str, str], list[str]]:
    """Environment and CMake defines that find numa.h and libnuma without libnuma-dev."""
    if NUMA_HEADER.exists():
        return {}, []
    libs = sorted(Path("/usr/lib/x86_64-linux-gnu").glob("libnuma.so.1*"))
    if not libs:
        raise SystemExit("no libnuma.so.1: apt-get install libnuma1 (or libnuma-dev)")
    subprocess.run(["apt-get", "download", "libnuma-dev"], check=True, cwd=scratch)
    deb = next(scratch.glob("libnuma-dev_*.deb"))
    subprocess.run(["dpkg", "-x", str(deb), str(scratch / "numa")], check=True)
    include = scratch / "numa" / "usr" / "include"
    env = {"CXXFLAGS": f"-I{include} " + os.environ.get("CXXFLAGS", "")}
    return env, [f"--config-settings=cmake.define.NUMA_LIB={libs[0]}"]


def build(args: argparse.Namespace) -> dict[str, float]:
    times: dict[str, float] = {}
    venv: Path = args.venv or LAB / f"venv-sglang-cpu-{args.version}"
    python = venv / "bin" / "python"
    if not python.exists():
        step("venv", times, [str(args.base_python), "-m", "venv", str(venv)])
    pip = [str(python), "-m", "pip", "install", "--progress-bar", "off"]
    if args.torch_index:
        pip += ["--extra-index-url", args.torch_index]
    with tempfile.TemporaryDirectory(prefix="sglang-cpu-build-") as tmp:
        scratch = Path(tmp)
        requirements = scratch / "requirements.txt"
        requirements.write_text("\n".join(cpu_requirements(args.src, args.torch)) + "\n")
        step("deps", times, [*pip, "-r", str(requirements)])
        step("sglang", times, [*pip, "--no-deps", f"sglang=={args.version}"])
        print(f"== cxx wrapper: {write_cxx_wrapper(venv)}, {write_sitecustomize(python)}")
        if not args.torch_index and guard_torchvision(python):
            print("== torchvision: ops registrations skipped when its ops are missing")
        kernel = scratch / "sgl-kernel"
        shutil.copytree(args.src / "sgl-kernel", kernel)
        shutil.copy(kernel / "pyproject_cpu.toml", kernel / "pyproject.toml")
        env, defines = numa_flags(scratch)
        env = {
            **os.environ,
            **env,
            "CMAKE_BUILD_PARALLEL_LEVEL": str(args.jobs),
            "VIRTUAL_ENV": str(venv),
            "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        }
        step(
            "kernel",
            times,
            [*pip, "--no-build-isolation", "--no-deps", *defines, str(kernel)],
            env=env,
        )
    check = (
        "import torch, sgl_kernel, sglang; "
        "print(sglang.__version__, torch.__version__, "
        "len(list(torch.ops.sgl_kernel.__dir__())))"
    )
    step(
        "verify",
        times,
        [str(python), "-c", check],
        env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1"},
    )
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, required=True, help="an SGLang checkout (its tag)")
    parser.add_argument("--version", required=True, help="the sglang wheel to install")
    parser.add_argument("--venv", type=Path, help="default LAB/venv-sglang-cpu-V")
    parser.add_argument("--base-python", type=Path, default=BASE_PYTHON)
    parser.add_argument("--torch", default="torch==2.13.0+cpu")
    parser.add_argument("--torch-index", help="an extra index with CPU torch wheels")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    times = build(args)
    print(json.dumps({"step_seconds": times, "total_s": round(sum(times.values()), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
