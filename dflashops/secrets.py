"""References to secrets: an environment variable name or a file path, never the value itself.

Inventories are committed and shared; a PVE token or root password written into one leaks. So a
secret is always ``{env: NAME}`` or ``{file: PATH}``, resolved only when a command needs it, and
the value never appears in ``repr``, logs or ``inventory show``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from dflashops.errors import SecretError

INLINE_REFUSED = "secrets are never written inline: use {env: VAR_NAME} or {file: /path/to/file}"


class SecretRef(BaseModel):
    """Where a secret lives. Exactly one of ``env`` and ``file``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_inline(cls, value: Any) -> Any:
        if isinstance(value, str | int | float):
            raise ValueError(INLINE_REFUSED)
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: or file:")
        if self.env is not None and not self.env.replace("_", "").isalnum():
            raise ValueError(f"env must be a variable name, not {self.env!r}")
        return self

    def describe(self) -> str:
        """Where to look, safe to print: ``env PVE_TOKEN`` or ``file /etc/pve-token``."""
        return f"env {self.env}" if self.env is not None else f"file {self.file}"

    def is_available(self, environ: dict[str, str] | None = None) -> bool:
        """Whether :meth:`reveal` would succeed, without reading the value into a message."""
        try:
            self.reveal(environ)
        except SecretError:
            return False
        return True

    def reveal(self, environ: dict[str, str] | None = None) -> str:
        """The secret's value. Raises :class:`SecretError` naming where it looked."""
        env = os.environ if environ is None else environ
        if self.env is not None:
            value = env.get(self.env)
            if not value:
                raise SecretError(f"environment variable {self.env} is not set or empty")
            return value
        assert self.file is not None
        path = self.file.expanduser()
        try:
            value = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SecretError(f"secret file {path} cannot be read: {exc.strerror}") from None
        if not value:
            raise SecretError(f"secret file {path} is empty")
        return value

    def loose_permissions(self) -> bool:
        """True when the secret file is readable by group or others (worth a warning)."""
        if self.file is None:
            return False
        try:
            mode = self.file.expanduser().stat().st_mode
        except OSError:
            return False
        return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))

    def redacted(self) -> dict[str, str]:
        """What ``inventory show`` prints: the reference, never the value."""
        return {"env": self.env} if self.env is not None else {"file": str(self.file)}
