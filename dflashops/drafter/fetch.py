"""Copy a model folder's metadata out of a container: config and tokenizer files and the
safetensors *headers*, never the weights (``launch`` and ``drafter push`` validate them locally
with the same checks ``drafter check`` runs)."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path
from typing import Any

from dflashops.drafter.safetensors import INDEX_FILE, MAX_HEADER_BYTES
from dflashops.errors import DrafterError, RemoteError
from dflashops.remote import SshConnection

# what a drafter check reads besides the weights' headers: the config and every tokenizer file a
# draft model's tokenizer is compared by (its id map, merges, sentencepiece model, chat template)
META_FILES = (
    "config.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
    "chat_template.jinja",
    "chat_template.json",
)
MAX_META_BYTES = 64 * 1024 * 1024
FETCH_DEADLINE_S = 120.0


def fetch_model_meta(
    conn: SshConnection,
    remote_dir: str,
    local_dir: Path,
    *,
    weights: bool,
    names: tuple[str, ...] = (*META_FILES, INDEX_FILE),
) -> list[str]:
    """Copy ``remote_dir``'s ``names`` that exist (config and tokenizer files by default) and,
    when ``weights``, its safetensors headers into ``local_dir``; return the names copied.
    A missing config.json raises."""
    local_dir.mkdir(parents=True, exist_ok=True)

    def copy(sftp: Any) -> list[str]:
        present = set(sftp.listdir(remote_dir))
        if "config.json" not in present:
            raise DrafterError(f"{remote_dir} in the container has no config.json")
        wanted = [n for n in names if n in present]
        for name in wanted:
            _copy_file(sftp, posixpath.join(remote_dir, name), local_dir / name)
        if weights:
            for name in _shards(local_dir, present):
                _copy_header(sftp, posixpath.join(remote_dir, name), local_dir / name)
                wanted.append(name)
        return wanted

    try:
        copied: list[str] = conn.sftp(f"read {remote_dir}", copy, FETCH_DEADLINE_S)
    except OSError as exc:
        raise RemoteError(
            f"cannot read {remote_dir}: {exc.strerror or exc}", host=conn.name
        ) from None
    return copied


def _shards(local_dir: Path, names: set[str]) -> list[str]:
    index = local_dir / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {})
            shards = sorted({str(v) for v in weight_map.values()})
        except (ValueError, AttributeError):
            return []  # the validator reports the broken index
        return [s for s in shards if posixpath.basename(s) == s and s in names]
    if "model.safetensors" in names:
        return ["model.safetensors"]
    return sorted(n for n in names if n.endswith(".safetensors"))


def _copy_file(sftp: Any, remote: str, local: Path) -> None:
    with sftp.open(remote, "rb") as handle:
        size = handle.stat().st_size
        if size > MAX_META_BYTES:
            raise DrafterError(f"{remote} is {size} bytes, over {MAX_META_BYTES}")
        handle.prefetch(size)
        local.write_bytes(handle.read(size))


def _copy_header(sftp: Any, remote: str, local: Path) -> None:
    """The 8-byte length and the JSON header only: the reader accepts header-only files."""
    with sftp.open(remote, "rb") as handle:
        prefix = handle.read(8)
        length = int.from_bytes(prefix, "little") if len(prefix) == 8 else 0
        if length < 2 or length > MAX_HEADER_BYTES:
            local.write_bytes(prefix)  # the validator names the broken file
            return
        local.write_bytes(prefix + handle.read(length))
