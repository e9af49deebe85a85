"""MTP: the target drafts with its own multi-token-prediction layers (rules in
:mod:`dflashops.drafter.checks_mtp`).

The checkpoint is the target's: launch passes the target as both ``drafter`` (so its safetensors
headers are read) and ``target``. ``params["method"]`` is the method name the engine will be
given (``mtp`` when absent, what dflashops' launch renders)."""

from __future__ import annotations

from dflashops.drafter.checks_mtp import (
    engine_findings,
    k_findings,
    mtp_layer_count,
    weights_findings,
)
from dflashops.drafter.checks_mtp_arch import arch_of
from dflashops.drafter.checks_mtp_registry import registry_findings
from dflashops.drafter.families import CheckInputs
from dflashops.drafter.files import DrafterFiles
from dflashops.drafter.result import CheckResult, merge_by_key
from dflashops.drafter.unchecked import no_files


def validate(inputs: CheckInputs) -> CheckResult:
    files = _model_files(inputs)
    if files is None:
        return no_files("mtp")
    config = files.config
    findings, count = mtp_layer_count(config)
    findings += weights_findings(config, files.weights, count)
    if inputs.engine is not None:
        method = str(inputs.params.get("method", "mtp"))
        findings += engine_findings(config, inputs.engine, method)
    if count is not None:
        findings += k_findings(inputs.engine, inputs.k, count, arch_of(config))
    if inputs.ref is not None:
        findings += registry_findings(files, inputs.ref, "mtp")
    return CheckResult.of(merge_by_key(findings), {})


def _model_files(inputs: CheckInputs) -> DrafterFiles | None:
    """The checkpoint whose MTP layers draft: the drafter files launch passes (the target read
    as a drafter, with its weights), else the target's config alone."""
    if inputs.drafter is not None:
        return inputs.drafter
    target = inputs.target
    if target is None:
        return None
    return DrafterFiles(name=target.name, config=target.config, path=target.path)
