"""What a trained drafter adds to its registry entry: the thinking mode it was trained for and
the acceptance it reached, as the registry's optional ``trained_for`` and
``expected_acceptance`` fields, each with its sources (``registry-fields.json`` in the run's
local folder; paste it into the drafter's entry, whose ``sources`` it extends).

From the run's own records only: ``provenance.json`` (the data stage's
``enable_thinking``; None, the template's default, says nothing and is left out) and the
``--evaluate`` bench of the new drafter (concurrency 1, the playbook's workload and k).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dflashops.training.evaluate import Evaluation

REGISTRY_FIELDS_FILE = "registry-fields.json"


def registry_fields(
    provenance: dict[str, Any] | None,
    evaluation: Evaluation | None,
    *,
    provenance_file: str,
    workload: str,
    engine: str,
    temperature: float | None = None,
    thinking: bool | None = None,
) -> dict[str, Any]:
    """The fields (and the sources they name); empty lists/None where the run did not show it."""
    sources: dict[str, str] = {}
    out: dict[str, Any] = {"sources": sources}
    generation = (provenance or {}).get("generation") or {}
    trained_thinking = generation.get("thinking")
    if isinstance(trained_thinking, bool):
        sources["train-provenance"] = (
            f"{provenance_file} — drafter train run {(provenance or {}).get('job')} "
            f"({(provenance or {}).get('created')}): the data stage regenerated the target's "
            f"answers with enable_thinking {str(trained_thinking).lower()}"
        )
        out["trained_for"] = {
            "thinking": trained_thinking,
            "basis": "original",
            "sources": ["train-provenance"],
        }
    after = evaluation.after if evaluation is not None else None
    if after is not None and after.k and (after.per_position or after.acceptance_length):
        sources["train-evaluation"] = (
            f"{after.bench_file} — drafter train --evaluate: the trained drafter benched at "
            f"concurrency 1, k={after.k}, workload {workload}, on {engine}"
        )
        item: dict[str, Any] = {
            "workload": workload,
            "k": after.k,
            "acceptance_length": after.acceptance_length,
            "per_position": [round(r, 4) for r in after.per_position[: after.k]],
            "engine": engine,
            "basis": "original",
            "sources": ["train-evaluation"],
        }
        if temperature is not None:
            item["temperature"] = temperature
        if thinking is not None:
            item["thinking"] = thinking
        out["expected_acceptance"] = [item]
    return out


def write_registry_fields(out_dir: Path, fields: dict[str, Any]) -> str | None:
    """``registry-fields.json`` in ``out_dir`` when the run showed anything; its path."""
    if not fields.get("trained_for") and not fields.get("expected_acceptance"):
        return None
    path = out_dir / REGISTRY_FIELDS_FILE
    path.write_text(json.dumps(fields, indent=2) + "\n", encoding="utf-8")
    return str(path)
