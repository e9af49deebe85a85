"""``/etc/dflashops/deployed.json``: what is deployed and running in a container.

``launch`` writes it after the server became ready (never before: a failed launch leaves the
previous manifest), reads it to decide "nothing changed", and ``drafter push`` / ``status`` read
it. Mode 600: it records each managed file's sha256, the secrets file's too.
"""

from __future__ import annotations

import json
import shlex
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dflashops.deployment.layout import DEFAULT_LAYOUT, Layout
from dflashops.errors import DflashopsError
from dflashops.pydantic_errors import first_error_line
from dflashops.remote import SshConnection, get_bytes, put_atomic

MAX_MANIFEST_BYTES = 1 * 2**20


class ManifestUnreadable(DflashopsError):
    """``deployed.json`` exists but is not a manifest (truncated, edited, a full disk)."""


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
            raise ManifestUnreadable(
                f"{source}: not a dflashops manifest ({first_error_line(exc)})",
                hint="`dflashops launch NAME --force` rebuilds it from what runs and the "
                "rendered files (the broken one is kept beside it); `stop` works without it",
            ) from None

    def file_sha(self, path: str) -> str | None:
        return next((f.sha256 for f in self.files if f.path == path), None)

    @property
    def argv(self) -> list[str]:
        """The engine command line the server was started with (the spec's ``argv``)."""
        argv = self.spec.get("argv")
        return [str(a) for a in argv] if isinstance(argv, list) else []

    @property
    def env(self) -> dict[str, str]:
        """The environment the spec added for the engine."""
        env = self.spec.get("env")
        return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


def read_manifest(conn: SshConnection, layout: Layout = DEFAULT_LAYOUT) -> DeployedManifest | None:
    """The container's manifest, or None when nothing was deployed (no file).

    A file that is not a manifest raises :class:`DflashopsError` naming it: callers that can go
    on without it (``bench``) catch that and say so.
    """
    q = shlex.quote(layout.manifest)
    if conn.probe(f"test -f {q}").exit_code != 0:
        return None
    data = get_bytes(conn, layout.manifest, max_bytes=MAX_MANIFEST_BYTES)
    return DeployedManifest.from_text(data.decode("utf-8", errors="replace"), layout.manifest)


def write_manifest(
    conn: SshConnection, manifest: DeployedManifest, layout: Layout = DEFAULT_LAYOUT
) -> None:
    """Replace the manifest atomically (mode 600: it holds the secrets file's checksum)."""
    put_atomic(conn, manifest.to_bytes(), layout.manifest, mode=0o600)


def keep_broken(conn: SshConnection, layout: Layout = DEFAULT_LAYOUT) -> str:
    """Move an unreadable manifest aside (``deployed.json.<UTC>.broken``) before it is rebuilt;
    returns where it went."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    kept = f"{layout.manifest}.{stamp}.broken"
    conn.run(
        f"mv -f -- {shlex.quote(layout.manifest)} {shlex.quote(kept)}",
        deadline=30.0,
        display="keep the broken deployed.json",
    )
    return kept
