"""Validate the drafter the container holds, before anything is pushed.

Why here and not remotely: the config, tokenizer files and the safetensors *headers* (never the
weights) are copied into a local temp folder over SFTP and checked by this CLI's own validator
and registry. That works before the engine venv exists or holds this dflashops version, and it
is the same check ``dflashops drafter check`` runs. The bundled server's preflight checks again
in the container at start (belt and braces: the files may change in between).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import parse_engine
from dflashops.drafter.fetch import META_FILES, fetch_model_meta
from dflashops.drafter.result import Finding
from dflashops.drafter.safetensors import INDEX_FILE
from dflashops.launch.args import TargetFacts, hybrid_from_config
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection


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


def validate(conn: SshConnection, playbook: Playbook) -> tuple[DrafterValidation, TargetFacts]:
    """Check the playbook's drafter (DFlash only) against its target and engine version, and
    read the target facts the engine arguments depend on."""
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
