"""The lab models: a tiny Qwen3 target and its drafters, built offline from a shipped corpus.

Importing this package needs only the standard library; ``build_lab_models`` needs torch and
transformers, so it runs inside the lab's vLLM venv (``python -m dflashops.lab.models OUT``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dflashops.lab.models.layout import (
    ACCEPTANCE,
    DFLASH,
    DRAFT_DECAY,
    DRAFT_IDENTICAL,
    FORMAT_VERSION,
    MANIFEST,
    PROMPTS,
    TARGET,
    LabModels,
    default_models_dir,
)

__all__ = [
    "ACCEPTANCE",
    "DFLASH",
    "DRAFT_DECAY",
    "DRAFT_IDENTICAL",
    "FORMAT_VERSION",
    "MANIFEST",
    "PROMPTS",
    "TARGET",
    "LabModels",
    "build_lab_models",
    "default_models_dir",
]


def build_lab_models(
    out_dir: Path | str, seed: int = 0, progress: Callable[[str], None] | None = None
) -> LabModels:
    """Build every lab model into ``out_dir``; needs torch (run it in the vLLM venv)."""
    from dflashops.lab.models.builders import build_all

    return build_all(Path(out_dir), seed=seed, progress=progress)
