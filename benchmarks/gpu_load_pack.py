"""What ``gpu_load.py`` carries to the H200, made here: two folders, one per device call, each
under the 64 MiB the run tool carries together with the working tree.

``pack(payload, out)`` takes ``../shared/gpu/pack.sh``'s WORKDIR (vLLM 0.26.0 in two xz chunks,
its sha256, and ``models/{target,drafter}``, the Qwen3-8B-shaped configs) and writes:

- ``out/load-a/``: ``part00`` and ``wheels/`` (dflashops built from HEAD, and the dependencies
  the GPU image lacks, as cp312 wheels: the list that worked in issue 22's sessions);
- ``out/load-b/``: ``part01``, ``sha256`` and ``models.tar.xz`` (also unpacked in ``out/models``,
  which no call carries): the 8B folders made to pass the
  bundled server's preflight (``gpu_models.py``: special tokens, header-only shards), the dense
  27B stand-in and its DFlash drafter (``gpu_dense27.py``), and ``workloads/q8b.jsonl`` (the
  16 prompts of 128 vocabulary words issue 22 used, byte for byte).

``out`` must be ignored by git (``echo /.gpu/ >> .git/info/exclude``): an untracked folder that git
does not ignore travels with every call.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpu_dense27
import gpu_models

from dflashops.drafter.safetensors import header_bytes

REPO = Path(__file__).resolve().parents[1]
CARRY_LIMIT = 64 * 2**20
# 63.5 MiB by file sizes was refused, 59.9 MiB went (2026-12-05): the tool counts more than we do
HEADROOM = 2 * 2**20
# what the GPU image lacked in issue 22 (RESULTS.md); pydantic comes with the vLLM payload
DEPENDENCIES = (
    "fabric", "invoke", "paramiko", "bcrypt", "PyNaCl", "cryptography", "cffi", "pycparser",
    "decorator", "Deprecated", "proxmoxer", "prometheus_client", "click", "rich",
)  # fmt: skip
PLATFORMS = (
    "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
    "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64",
    "manylinux1_x86_64", "linux_x86_64",
)  # fmt: skip


def q8b_workload() -> str:
    """gpu_models.write_workloads's q8b.jsonl (seed 22), without the lab's tiny prompts."""
    rnd = random.Random(22)
    rows = [
        {"id": f"q{i}", "prompt": " ".join(f"w{rnd.randrange(100, 150000)}" for _ in range(128))}
        for i in range(16)
    ]
    return "".join(json.dumps(row) + "\n" for row in rows)


def model_folders(pack_models: Path, dest: Path) -> None:
    """The four model folders and the workload, as gpu_models.py and gpu_dense27.py make them."""
    target, drafter = dest / "target", dest / "drafter"
    shutil.copytree(pack_models / "target", target)
    shutil.copytree(pack_models / "drafter", drafter)
    gpu_models.mark_specials(target / "tokenizer.json")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(target / name, drafter / name)
    target_config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    drafter_config = json.loads((drafter / "config.json").read_text(encoding="utf-8"))
    (target / "model.safetensors").write_bytes(
        header_bytes(gpu_models.target_tensors(target_config))
    )
    (drafter / "model.safetensors").write_bytes(
        header_bytes(gpu_models.drafter_tensors(drafter_config, target_config))
    )
    big = gpu_dense27.target_config()
    gpu_dense27.write_folder(dest / "target27", big, gpu_models.target_tensors(big))
    config27 = gpu_dense27.drafter_config(guessed=False)
    gpu_dense27.write_folder(
        dest / "drafter27", config27, gpu_models.drafter_tensors(config27, big)
    )
    (dest / "workloads").mkdir()
    (dest / "workloads" / "q8b.jsonl").write_text(q8b_workload(), encoding="utf-8")


def pinned(name: str) -> str:
    """``name==version`` as installed here (the versions the tests pass with: fabric wants
    invoke < 3, which an unpinned download would not respect without resolving), else ``name``."""
    try:
        return f"{name}=={version(name)}"
    except PackageNotFoundError:
        return name


def wheels(dest: Path) -> None:
    """dflashops from HEAD (what is committed, not the work tree) and its missing dependencies."""
    dest.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip"]
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", "HEAD"],
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        subprocess.run(
            [*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dest), tmp],
            check=True,
        )
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [*pip, "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "--implementation", "cp", *platforms, "-d", str(dest), *map(pinned, DEPENDENCIES)],
        check=True,
    )  # fmt: skip


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def tree_size() -> int:
    """What the run tool carries anyway: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    return sum((REPO / name.decode()).stat().st_size for name in listed if name and
               (REPO / name.decode()).is_file())  # fmt: skip


def pack(payload: Path, out: Path) -> int:
    chunks = payload / "chunks"
    parts = sorted(chunks.glob("part*"))
    if [p.name for p in parts] != ["part00", "part01"]:
        raise SystemExit(f"{chunks}: expected part00 and part01 from pack.sh, found {parts}")
    probe = (out / "load-a" / "probe").resolve()
    if not probe.is_relative_to(REPO):
        print(f"note: {out} is outside the repository: the run tool carries only paths in it")
    elif subprocess.run(
        ["git", "-C", str(REPO), "check-ignore", "-q", str(probe)], check=False
    ).returncode:
        raise SystemExit(
            f"{out} is not ignored by git: every call would carry it. Run "
            "`echo /.gpu/ >> .git/info/exclude` (or ignore your --out) first"
        )
    a, b = out / "load-a", out / "load-b"
    for folder in (a, b):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    shutil.copy(parts[0], a / "part00")
    wheels(a / "wheels")
    shutil.copy(parts[1], b / "part01")
    # load-a with every wheel came to 63.5 MiB with the work tree and the run tool refused it
    # (its count runs above the file sizes); the largest wheel rides with the second chunk
    (b / "wheels").mkdir()
    for wheel in (a / "wheels").glob("cryptography-*.whl"):
        shutil.move(wheel, b / "wheels" / wheel.name)
    shutil.copy(chunks / "sha256", b / "sha256")
    staged = out / "models"  # kept here too: `gpu_load.py plan --models` checks the drafters
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    model_folders(payload / "models", staged)
    with tarfile.open(b / "models.tar.xz", "w:xz") as tar:
        for folder in sorted(staged.iterdir()):
            tar.add(folder, arcname=folder.name)
    tree = tree_size()
    worst = 0
    for folder in (a, b):
        total = size(folder) + tree
        worst = max(worst, total)
        print(f"{folder}: {size(folder) / 2**20:.1f} MiB + work tree {tree / 2**20:.1f} MiB = "
              f"{total / 2**20:.1f} MiB of {CARRY_LIMIT / 2**20:.0f}")  # fmt: skip
    if worst > CARRY_LIMIT - HEADROOM:
        free = HEADROOM / 2**20
        print(f"too large for one call: the run tool carries 64 MiB at most, and its count ran "
              f"above the file sizes (keep {free:.0f} MiB free)", file=sys.stderr)  # fmt: skip
        return 1
    return 0
