"""``dflashops lab models``: install the lab's vLLM CPU runtime (once) and build the lab models."""

from __future__ import annotations

from pathlib import Path

import click

from dflashops.cli.context import dump_json


@click.command("models")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder for the models. Default: $DFLASHOPS_CACHE/lab/models (~/.cache/dflashops/…).",
)
@click.option("--force", is_flag=True, help="Rebuild the models even when a build is there.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def models(out: Path | None, force: bool, as_json: bool) -> None:
    """Build the lab models offline: a tiny Qwen3 target, a DFlash drafter, an identical draft,
    a draft with decaying acceptance, and n-gram prompts.

    The first run also installs the vLLM CPU runtime (about 3 minutes, 3.5 GB), whose
    interpreter builds the models; later runs reuse both.
    """
    from dflashops.cli.progress import spinner
    from dflashops.lab.models.ensure import ensure_lab_models
    from dflashops.lab.runtime import ensure_runtime

    # on stderr even with --json: a first run takes minutes, and stdout stays the one document
    with spinner("lab models") as say:
        say("the vLLM CPU runtime (installed once)")
        runtime = ensure_runtime(progress=say)
        say("the lab models (built once)")
        built_models, built = ensure_lab_models(runtime, out, force=force, progress=say)

    summary = {
        "runtime": {"venv": str(runtime.venv), "vllm": runtime.vllm_version},
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
        if key not in ("runtime", "built"):
            table.add_row(key, str(value))
    table.add_row("vLLM", f"{runtime.vllm_version} in {runtime.venv}")
    make_console().print(table)
