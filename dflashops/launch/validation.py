"""Validate the drafter the container holds, by its method's family's rules, before anything is
pushed.

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
from typing import Any

from dflashops.drafter.check import check_paths
from dflashops.drafter.engine import ZLAB_VIEW_KEY, EngineSpec, parse_engine
from dflashops.drafter.families import CheckInputs, Family, method_family
from dflashops.drafter.fetch import META_FILES, fetch_model_meta
from dflashops.drafter.files import read_target
from dflashops.drafter.methods import validate_method
from dflashops.drafter.result import CheckResult, Finding
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

    @property
    def zlab_view(self) -> bool:
        """The engine reads this drafter through the z-lab view the server writes."""
        return any(f.key == ZLAB_VIEW_KEY for f in self.findings)

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
    """Check the playbook's drafter by its method's family's rules (DFlash, DSpark, EAGLE,
    a draft model: its checkpoint; MTP: the target's own layers; n-gram, suffix: their
    parameters) against the target and the engine version, and read the target facts the
    engine arguments depend on."""
    drafter = playbook.drafter
    family = method_family(drafter.method)
    with tempfile.TemporaryDirectory(prefix="dflashops-launch-") as tmp:
        target_dir = Path(tmp) / "target" / playbook.model.path.name
        # MTP's drafter is the target's own layers: their tensors are in its headers
        target_weights = family == "mtp"
        names = (*META_FILES, INDEX_FILE) if family is not None else ("config.json",)
        fetch_model_meta(
            conn, str(playbook.model.path), target_dir, weights=target_weights, names=names
        )
        target = TargetFacts(hybrid_linear_attention=_hybrid(target_dir))
        if family is None:
            reason = f"method {drafter.method}: no drafter to check"
            return DrafterValidation("not run", reason=reason), target
        drafter_dir: Path | None = None
        if drafter.model is not None:
            # the folder name is kept: the registry matches drafters by name
            drafter_dir = Path(tmp) / "drafter" / drafter.model.path.name
            fetch_model_meta(conn, str(drafter.model.path), drafter_dir, weights=True)
        elif family == "mtp":
            drafter_dir = target_dir
        engine = parse_engine(f"{playbook.engine.name}=={playbook.engine.version}")
        result = _check(playbook, family, drafter_dir, target_dir, engine)
    return (
        DrafterValidation(
            status=result.summary.status,
            findings=result.findings,
            required_env=dict(result.required_env),
        ),
        target,
    )


def method_params(playbook: Playbook) -> dict[str, Any]:
    """What a family's rules check besides the files: the method vLLM is given (MTP's name
    differs by version), n-gram's lookup window, the context a draft model must cover."""
    drafter = playbook.drafter
    params = {
        "method": drafter.method,
        "prompt_lookup_min": drafter.prompt_lookup_min,
        "prompt_lookup_max": drafter.prompt_lookup_max,
        "max_model_len": playbook.server.max_model_len,
    }
    return {key: value for key, value in params.items() if value is not None}


def _check(
    playbook: Playbook,
    family: Family,
    drafter_dir: Path | None,
    target_dir: Path,
    engine: EngineSpec,
) -> CheckResult:
    k = playbook.server.num_speculative_tokens
    if drafter_dir is None:  # n-gram, suffix: nothing but their parameters
        inputs = CheckInputs(
            None, read_target(str(target_dir)), None, engine, k, method_params(playbook)
        )
        return validate_method(family, inputs)
    return check_paths(
        str(drafter_dir),
        target=str(target_dir),
        ref=playbook.drafter.ref,
        engine=engine,
        k=k,
        method=playbook.drafter.method,
        params=method_params(playbook),
    ).result


def _hybrid(target_dir: Path) -> bool:
    try:
        config = json.loads((target_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and hybrid_from_config(config)
