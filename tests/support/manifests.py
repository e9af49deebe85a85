"""A valid ``deployed.json`` for tests, with any field replaced."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dflashops.deployment.manifest import DeployedManifest


def deployed_manifest(**fields: Any) -> DeployedManifest:
    """What ``launch`` writes after serving ``tiny`` on port 30000 with DFlash k=4."""
    values: dict[str, Any] = {
        "playbook": "book",
        "container": "ct",
        "engine": "vllm",
        "engine_version": "0.32.0",
        "dflashops_version": "0.1.0",
        "dflashops_wheel_sha256": "a" * 64,
        "supervisor": "fallback",
        "files": [],
        "spec": {"argv": ["vllm", "serve", "/models/target"], "model": "/models/target"},
        "speculative_config": {"method": "dflash", "num_speculative_tokens": 4},
        "method": "dflash",
        "num_speculative_tokens": 4,
        "served_model_name": "tiny",
        "host": "0.0.0.0",
        "port": 30000,
        "endpoint": "http://10.0.0.1:30000/v1",
        "pid": 42,
        "deployed_at": datetime(2026, 12, 1, tzinfo=UTC),
        "started_at": datetime(2026, 12, 1, tzinfo=UTC),
    }
    values.update(fields)
    return DeployedManifest.model_validate(values)
