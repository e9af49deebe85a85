"""References to secrets: an environment variable name or a file path, never the value itself.

Inventories are committed and shared; a PVE token or root password written into one leaks. So a
secret is always ``{env: NAME}`` or ``{file: PATH}``, resolved only when a command needs it, and
the value never appears in ``repr``, logs or ``inventory show``.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from dflashops.errors import SecretError, read_capped, warn

INLINE_REFUSED = "secrets are never written inline: use {env: VAR_NAME} or {file: /path/to/file}"


class SecretRef(BaseModel):
    """Where a secret lives. Exactly one of ``env`` and ``file``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="before")
    @classmethod
    def _refuse_inline(cls, value: Any) -> Any:
        # Anything but a mapping is an inline value (a string, a number, a list, bytes): the
        # message never repeats it, whatever its type.
        if not isinstance(value, dict | SecretRef):
            raise ValueError(INLINE_REFUSED)
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of env: or file:")
        if self.env is not None and not ENV_NAME.fullmatch(self.env):
            # not echoed: a secret pasted where its variable's name belongs must not be printed
            raise ValueError("env must be a variable name (letters, digits and _)")
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
        return _read_secret_file(self._path())

    def _path(self) -> Path:
        assert self.file is not None
        try:
            return self.file.expanduser()
        except RuntimeError:  # ~nouser/...: no such user, no home to expand
            raise SecretError(
                f"secret file {self.file} cannot be read: its ~user does not exist"
            ) from None

    def loose_permissions(self) -> bool:
        """True when the secret file is readable by group or others (worth a warning)."""
        if self.file is None:
            return False
        try:
            mode = self._path().stat().st_mode
        except (OSError, SecretError):
            return False
        return bool(mode & (stat.S_IRWXG | stat.S_IRWXO))

    def redacted(self) -> dict[str, str]:
        """What ``inventory show`` prints: the reference, never the value."""
        return {"env": self.env} if self.env is not None else {"file": str(self.file)}


MAX_SECRET_BYTES = 64 * 1024  # a password, a token, a PEM key: a few KB at most
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _read_secret_file(path: Path) -> str:
    """The stripped text of a secret file; every way it can be unusable is a ``SecretError``.

    A file group or others may read still works, with a warning naming it.
    """
    try:
        raw = read_capped(path, MAX_SECRET_BYTES)
    except OSError as exc:
        raise SecretError(f"secret file {path} cannot be read: {exc.strerror}") from None
    try:
        value = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise SecretError(f"secret file {path} is not UTF-8 text") from None
    if "\x00" in value:
        raise SecretError(f"secret file {path} contains a NUL byte (not a text secret)")
    if not value:
        raise SecretError(f"secret file {path} is empty")
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = 0
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warn(f"secret file {path} can be read or written by group or others (chmod 600 {path})")
    return value
