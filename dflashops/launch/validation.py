"""Validate the drafter the container holds, before anything is pushed.

Why here and not remotely: the config, tokenizer files and the safetensors *headers* (never the
weights) are copied into a local temp folder over SFTP and checked by this CLI's own validator
and registry. That works before the engine venv exists or holds this dflashops version, and it
is the same check ``dflashops drafter check`` runs. The bundled server's preflight checks again
in the container at start (belt and braces: the files may change in between).
"""

from __future__ import annotations

import json
import posixpath
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dflashops.drafter.result import Finding
from dflashops.drafter.safetensors import INDEX_FILE, MAX_HEADER_BYTES
from dflashops.errors import DrafterError, RemoteError
from dflashops.launch.args import TargetFacts, hybrid_from_config
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection

META_FILES = ("config.json", "tokenizer_config.json", "tokenizer.json")
MAX_META_BYTES = 64 * 1024 * 1024
FETCH_DEADLINE_S = 120.0


@dataclass(frozen=True)
class DrafterValidation:
    status: str  # clean | warnings | errors | not run
    findings: tuple[Finding, ...] = ()
    required_env: dict[str, str] = field(default_factory=dict)
    reason: str | None = None  # why it did not run

    @property
    def failed(self) -> bool:
        return self.status == "errors"

    def lines(self, severity: str | None = None) -> list[str]:
        """One line per finding (``severity: key: expected …, found …``); with ``severity``,
        only those, without the prefix."""
        return [
            (f"{f.severity}: " if severity is None else "")
            + f"{f.key}: expected {f.expected}, found {f.found}"
            for f in self.findings
            if severity is None or f.severity == severity
        ]


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


def validate(conn: SshConnection, playbook: Playbook) -> tuple[DrafterValidation, TargetFacts]:
    """Check the playbook's drafter (DFlash only) against its target and engine version, and
    read the target facts the engine arguments depend on."""
    from dflashops.drafter.check import check_paths
    from dflashops.drafter.engine import parse_engine

    drafter = playbook.drafter
    with tempfile.TemporaryDirectory(prefix="dflashops-launch-") as tmp:
        target_dir = Path(tmp) / "target" / playbook.model.path.name
        checked = drafter.method == "dflash" and drafter.model is not None
        # without a DFlash check only the target's config is needed (the engine arguments)
        names = (*META_FILES, INDEX_FILE) if checked else ("config.json",)
        fetch_model_meta(conn, str(playbook.model.path), target_dir, weights=False, names=names)
        target = TargetFacts(hybrid_linear_attention=_hybrid(target_dir))
        if not checked or drafter.model is None:
            reason = f"method {drafter.method} has no DFlash drafter config to check"
            return DrafterValidation("not run", reason=reason), target
        # the folder name is kept: the registry matches drafters by name
        drafter_dir = Path(tmp) / "drafter" / drafter.model.path.name
        fetch_model_meta(conn, str(drafter.model.path), drafter_dir, weights=True)
        engine = parse_engine(f"{playbook.engine.name}=={playbook.engine.version}")
        run = check_paths(
            str(drafter_dir),
            target=str(target_dir),
            ref=drafter.ref,
            engine=engine,
            k=playbook.server.num_speculative_tokens,
        )
    result = run.result
    return (
        DrafterValidation(
            status=result.summary.status,
            findings=result.findings,
            required_env=dict(result.required_env),
        ),
        target,
    )


def _hybrid(target_dir: Path) -> bool:
    try:
        config = json.loads((target_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and hybrid_from_config(config)
