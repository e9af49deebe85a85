"""What ``lab up`` bind-mounts read-only into every lab container, when it exists."""

from __future__ import annotations

from pathlib import Path

from dflashops.lab.daemon import CT_MODELS_DIR, CT_VENV_DIR


def lab_mounts() -> dict[str, Path]:
    """Container path -> host folder: the cached vLLM CPU venv and the lab models, if built."""
    from dflashops.lab.models.layout import default_models_dir
    from dflashops.lab.runtime import find_runtime

    found: dict[str, Path] = {}
    runtime = find_runtime()
    if runtime is not None:
        found[CT_VENV_DIR] = runtime.venv
    models = default_models_dir()
    if models.is_dir():
        found[CT_MODELS_DIR] = models
    return found
