"""The export stage: the trained drafter as a directory the engine serves, checked and recorded.

``export/`` holds the last checkpoint's ``model.safetensors`` unchanged (``speculators``
saves the draft's own weights in bfloat16; the embedding and LM head are the target's, which
vLLM shares at load time) and its ``config.json`` in the ``speculators`` layout that vLLM
(0.32) reads through its ``update_dflash`` adapter: ``speculators_model_type: dflash``, the
Qwen3 layer config nested under ``transformer_layer_config`` (with ``layer_types``),
``aux_hidden_state_layer_ids`` = target layer ids + 1, top-level ``mask_token_id`` and
``block_size``. Dropped from the checkpoint's config: ``auto_map`` (it names the
``config.py`` that speculators writes for transformers' remote code, which the export does not
carry). The target's tokenizer files are copied beside them, so the directory is complete on
its own (``drafter check`` compares the two tokenizers).

Then ``drafter check`` runs against the target (with the engine version found in this venv and
k = block size - 1): an error stops the stage. ``provenance.json`` (in the run's folder and in
``export/``) records what the drafter was trained on and with: the dataset's sha256 and sample
count, thinking mode and temperature, the shape, steps and final loss, and the versions of
torch, transformers, speculators and vllm.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import EngineSpec, parse_engine
from dflashops.errors import DflashopsError, DrafterError
from dflashops.progress import Say
from dflashops.training.job import TrainingJob
from dflashops.training.trainer import last_checkpoint, read_final_metrics, resume_global_step

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PROVENANCE_FILE = "provenance.json"
# what a target directory holds for its tokenizer and chat template
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
# config keys of a checkpoint that only make sense next to the files speculators writes there
CHECKPOINT_ONLY_KEYS = ("auto_map",)
VERSIONED_PACKAGES = ("torch", "transformers", "speculators", "vllm")


class ExportError(DflashopsError):
    """The export stage has nothing to export, or the exported drafter fails its check."""


def export_drafter(job: TrainingJob, say: Say) -> dict[str, Any]:
    """Write ``export/`` from the last checkpoint, check it against the target, record it."""
    checkpoints = Path(job.paths.checkpoints)
    checkpoint = last_checkpoint(checkpoints)
    if checkpoint is None or not (checkpoint / WEIGHTS_FILE).is_file():
        raise ExportError(f"no checkpoint in {checkpoints}", hint="run the train stage first")
    out = Path(job.paths.export)
    say(f"export: {checkpoint} -> {out}")
    write_export(checkpoint, Path(job.target), out)
    findings = check_export(job, out)
    errors = [f for f in findings if f["severity"] == "error"]
    warnings = [f for f in findings if f["severity"] == "warning"]
    for finding in findings:
        say(f"export: drafter check {finding['severity']}: {finding['key']}: {finding['found']}")
    if errors:
        keys = ", ".join(f["key"] for f in errors)
        raise ExportError(
            f"the exported drafter fails drafter check against {job.target}: {keys}",
            hint=f"dflashops drafter check {out} --target {job.target}",
        )
    provenance = build_provenance(job, checkpoint)
    text = json.dumps(provenance, indent=2, sort_keys=True) + "\n"
    Path(job.paths.provenance).write_text(text, encoding="utf-8")
    (out / PROVENANCE_FILE).write_text(text, encoding="utf-8")
    say(f"export: drafter check clean of errors ({len(warnings)} warnings); provenance written")
    return {
        "export": str(out),
        "checkpoint": str(checkpoint),
        "steps": provenance["training"]["steps"],
        "final_loss": provenance["training"]["final_loss"],
        "check_warnings": [f"{f['key']}: {f['found']}" for f in warnings],
        "provenance": job.paths.provenance,
    }


def write_export(checkpoint: Path, target: Path, out: Path) -> None:
    """Config, weights and the target's tokenizer files into ``out`` (replaced as a whole)."""
    staging = out.with_name(out.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    config = json.loads((checkpoint / CONFIG_FILE).read_text(encoding="utf-8"))
    for key in CHECKPOINT_ONLY_KEYS:
        config.pop(key, None)
    (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    shutil.copyfile(checkpoint / WEIGHTS_FILE, staging / WEIGHTS_FILE)
    for name in TOKENIZER_FILES:
        if (target / name).is_file():
            shutil.copyfile(target / name, staging / name)
    shutil.rmtree(out, ignore_errors=True)
    staging.replace(out)


def check_export(job: TrainingJob, out: Path) -> list[dict[str, str]]:
    """``drafter check`` of the export against the target: its findings, most severe first."""
    try:
        run = check_paths(
            str(out), target=job.target, engine=_engine(), k=job.drafter.block_size - 1
        )
    except DrafterError as exc:
        raise ExportError(f"drafter check could not read the export: {exc.message}") from exc
    return [
        {"severity": f.severity, "key": f.key, "found": f.found, "expected": f.expected}
        for f in run.result.findings
        if f.severity != "info"
    ]


def build_provenance(job: TrainingJob, checkpoint: Path) -> dict[str, Any]:
    """What the exported drafter was trained on and with."""
    final = read_final_metrics(Path(job.paths.metrics))
    return {
        "job": job.name,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "target": job.target,
        "dataset": {
            "path": job.dataset,
            "sha256": _sha256(Path(job.dataset)),
            "samples": _count_lines(Path(job.paths.regenerated)),
        },
        "generation": {
            "thinking": job.data.thinking,
            "temperature": job.data.temperature,
            "max_tokens": job.data.max_tokens,
            "served_model": job.data.served_model,
        },
        "drafter": {
            "num_layers": job.drafter.num_layers,
            "block_size": job.drafter.block_size,
            "target_layer_ids": list(job.drafter.target_layer_ids),
            "mask_token_id": job.drafter.mask_token_id,
            "layer_types": job.drafter.layer_types,
        },
        "training": {
            "checkpoint": str(checkpoint),
            "steps": resume_global_step(Path(job.paths.checkpoints)),
            "final_loss": final.get("loss"),
            "lr": job.train.lr,
            "seq_len": job.train.seq_len,
            "seed": job.train.seed,
        },
        "versions": _versions(),
    }


def _engine() -> EngineSpec | None:
    """The vLLM of this venv (the engine that will serve the export), when it has one."""
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None
    try:
        return parse_engine(f"vllm=={version}")
    except DrafterError:
        return None


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _sha256(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(2**20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def _count_lines(path: Path) -> int | None:
    try:
        return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    except OSError:
        return None
