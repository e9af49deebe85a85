"""What a venv needs to train drafters: vLLM's ``speculators`` library, without its GPU extras.

``speculators`` declares ``torchvision`` and ``torchaudio``; pip would pull their CUDA builds next
to a CPU (or differently pinned) torch and break ``import torch``'s neighbours. So the library and
its hidden-state connector go in with ``--no-deps`` and the rest of what it imports is listed
here (everything else it needs — torch, transformers, safetensors, pydantic, httpx, openai —
comes with vLLM, which every engine venv that trains already holds).
"""

from __future__ import annotations

SPECULATORS_VERSION = "0.9.0"
# installed with --no-deps: their own requirements include torchvision/torchaudio
NO_DEPS = (f"speculators=={SPECULATORS_VERSION}", f"hs-connectors=={SPECULATORS_VERSION}")
# what speculators imports that vLLM does not bring (bounded as speculators 0.9.0 bounds them)
WITH_DEPS = (
    "datasets>=4.0.0,<=5.1.0",
    "loguru>=0.7.2,<=0.7.3",
    "typer>=0.12.0",
    "pydantic-settings>=2.0.0",
)
# `python -c` probe: exit 0 when the installed speculators is the pinned one and imports
PROBE = (
    "import importlib.metadata as m, sys\n"
    "import speculators.models.dflash, speculators.train.trainer\n"
    f"sys.exit(0 if m.version('speculators') == {SPECULATORS_VERSION!r} else 3)\n"
)


def pip_commands(python: str) -> list[list[str]]:
    """The two pip runs that install the training packages into ``python``'s environment."""
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "--progress-bar", "off"]
    return [[*pip, "--no-deps", *NO_DEPS], [*pip, *WITH_DEPS]]
