"""The lab models: a tiny Qwen3 target and its drafters, built offline from a shipped corpus.

Importing this package needs only the standard library; ``build_lab_models`` needs torch,
transformers and ``speculators``, and serves the target with vLLM while it trains the DFlash
drafter, so it runs inside the lab's vLLM venv (``python -m dflashops.lab.models OUT``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dflashops.lab.models.layout import (
    ACCEPTANCE,
    DFLASH,
    DFLASH_GUESSED,
    DFLASH_TRAINING,
    DRAFT_DECAY,
    DRAFT_IDENTICAL,
    FORMAT_VERSION,
    MANIFEST,
    PROMPTS,
    TARGET,
    TARGET_TRAINING,
    LabModels,
    default_models_dir,
)

if TYPE_CHECKING:
    from dflashops.lab.runtime import VllmRuntime

__all__ = [
    "ACCEPTANCE",
    "DFLASH",
    "DFLASH_GUESSED",
    "DFLASH_TRAINING",
    "DRAFT_DECAY",
    "DRAFT_IDENTICAL",
    "FORMAT_VERSION",
    "MANIFEST",
    "PROMPTS",
    "TARGET",
    "TARGET_TRAINING",
    "LabModels",
    "build_lab_models",
    "default_models_dir",
]


def build_lab_models(
    out_dir: Path | str,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    *,
    runtime: VllmRuntime | None = None,
) -> LabModels:
    """Build every lab model into ``out_dir``; needs torch (run it in the vLLM venv).

    Without ``runtime`` (the venv this runs in) only the deterministic part is built: no DFlash
    drafter, no manifest."""
    from dflashops.lab.models.builders import build_all

    return build_all(Path(out_dir), seed=seed, progress=progress, runtime=runtime)
