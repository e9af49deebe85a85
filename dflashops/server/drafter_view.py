"""The z-lab view of a speculators-layout DFlash drafter, written just before SGLang starts.

SGLang reads a DFlash drafter's ``config.json`` with transformers' ``AutoConfig``, which needs a
top-level ``model_type``; the speculators layout (what ``dflashops drafter train`` exports, and
what vLLM reads as it is) nests it under ``transformer_layer_config``, and a real SGLang 0.5.16
exited with "Unrecognized model". The view is a folder dflashops owns (``spec.drafter_view``):
``config.json`` is the z-lab layout built as vLLM builds it from the same file
(:func:`dflashops.drafter.formats.checked_view`) plus the target's layer count SGLang checks the
layer ids against (:func:`zlab_config`), and every other entry of the drafter's folder
is a symbolic link to the original, so the weights are never copied. Writing it again is cheap
and safe: links are replaced atomically, and only links the view holds are ever removed (never a
file or a folder, so nothing is deleted through a link or a mount).

Standard library and :mod:`dflashops.drafter.formats` only: the bundled server imports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dflashops.drafter.formats import SPECULATORS, checked_view, config_format

CONFIG = "config.json"
PARTIAL_CONFIG = f".{CONFIG}.tmp"  # left by a write that was cut short: overwritten next time


class ViewError(Exception):
    """The view could not be written; the message says which file and why."""


def write_view(drafter: Path, view: Path, target: Path) -> str:
    """Write the z-lab view of ``drafter`` (for ``target``) at ``view``; return what it holds,
    in one line."""
    config = _read_config(drafter)
    if config_format(config) != SPECULATORS:
        raise ViewError(f"{drafter / CONFIG} is not in the speculators layout: nothing to convert")
    zlab = zlab_config(config, _target_layers(target))
    try:
        view.mkdir(parents=True, exist_ok=True)
        linked = _link_entries(drafter, view)
        _write_atomically(view / CONFIG, json.dumps(zlab, indent=2) + "\n")
    except OSError as exc:
        raise ViewError(f"cannot write the drafter view {view}: {exc}") from exc
    return f"{view}: z-lab config.json of {drafter}, {linked} file(s) linked"


def zlab_config(config: dict[str, Any], target_layers: int | None) -> dict[str, Any]:
    """The z-lab layout of a speculators-layout ``config``, as SGLang needs it: vLLM's
    conversion plus ``dflash_config.num_target_layers``, the bound SGLang's DFlashDraftModel
    checks ``target_layer_ids`` against (without it, the drafter's own layer count: a 1-layer
    drafter fed target layers 0-2 stopped a real 0.5.16 with "out-of-range layer id")."""
    zlab = checked_view(config)
    nested = zlab.get("dflash_config")
    if isinstance(nested, dict) and target_layers is not None:
        nested.setdefault("num_target_layers", target_layers)
    return zlab


def _read_config(folder: Path) -> dict[str, Any]:
    try:
        config = json.loads((folder / CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ViewError(f"cannot read {folder / CONFIG}: {exc}") from exc
    if not isinstance(config, dict):
        raise ViewError(f"{folder / CONFIG} is not a JSON object")
    return config


def _target_layers(target: Path) -> int | None:
    """The target's layer count (a multimodal target keeps it in ``text_config``)."""
    config = _read_config(target)
    text = config.get("text_config")
    layers = (text if isinstance(text, dict) else config).get("num_hidden_layers")
    layers = config.get("num_hidden_layers", layers) if layers is None else layers
    return layers if isinstance(layers, int) and not isinstance(layers, bool) else None


def _link_entries(drafter: Path, view: Path) -> int:
    wanted = {entry.name for entry in drafter.iterdir() if entry.name != CONFIG}
    for entry in view.iterdir():
        if entry.name in (CONFIG, PARTIAL_CONFIG):
            continue
        if not entry.is_symlink():
            raise OSError(f"{entry} is not a link this view made; not touching it")
        if entry.name not in wanted:
            entry.unlink()  # a link to a file the drafter no longer has (unlink never follows)
    for name in sorted(wanted):
        link, target = view / name, drafter / name
        if link.is_symlink() and link.readlink() == target:
            continue
        fresh = view / f".{name}.link"
        if fresh.is_symlink():
            fresh.unlink()
        fresh.symlink_to(target)
        fresh.replace(link)
    return len(wanted)


def _write_atomically(path: Path, text: str) -> None:
    if path.is_symlink():
        path.unlink()  # config.json is the view's own file, never a link to the original
    fresh = path.with_name(PARTIAL_CONFIG)
    fresh.write_text(text, encoding="utf-8")
    fresh.replace(path)
