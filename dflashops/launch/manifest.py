"""``/etc/dflashops/deployed.json``: what is deployed and running in a container.

``launch`` writes it after the server became ready (never before: a failed launch leaves the
previous manifest), reads it to decide "nothing changed", and ``drafter push`` / ``status`` read
it. Mode 600: it records each managed file's sha256, the secrets file's too.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dflashops.errors import DflashopsError


class DeployedFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    mode: int


class DeployedManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = 1
    playbook: str
    container: str
    engine: str
    engine_version: str
    dflashops_version: str
    dflashops_wheel_sha256: str
    supervisor: Literal["systemd", "fallback"]
    files: list[DeployedFile]
    spec: dict[str, Any]
    speculative_config: dict[str, Any] | None
    method: str
    num_speculative_tokens: int | None
    served_model_name: str
    host: str
    port: int
    endpoint: str
    api_key_env: str | None = None  # the operator's variable readiness probes read the key from
    pid: int | None
    deployed_at: datetime
    started_at: datetime | None
    ready_in_s: float | None = None
    drafter_validation: str = "not run"  # clean | warnings | errors (forced) | not run
    forced: bool = False
    # what the bundled server's preflight added at exec time (e.g. NCCL_P2P_DISABLE=1)
    exec_env: dict[str, str] = {}
    nccl_p2p_disable: bool = False

    def to_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode()

    @classmethod
    def from_text(cls, text: str, source: str = "deployed.json") -> DeployedManifest:
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise DflashopsError(
                f"{source}: not a dflashops manifest ({where}: {first['msg']})",
                hint="it is rewritten by the next successful launch",
            ) from None

    def file_sha(self, path: str) -> str | None:
        return next((f.sha256 for f in self.files if f.path == path), None)
