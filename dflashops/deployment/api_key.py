"""The server's API key: always read from the environment variable the playbook names
(``server.api_key_env``), never from argv or a file dflashops writes locally."""

from __future__ import annotations

from collections.abc import Mapping

from dflashops.errors import SecretError


def server_api_key(env_name: str | None, environ: Mapping[str, str], *, whose: str) -> str | None:
    """The key in ``$env_name``; None when no variable is named. A named variable that is unset
    or empty is an error, not an unauthenticated run that fails later with 401s."""
    if not env_name:
        return None
    value = environ.get(env_name)
    if not value:
        raise SecretError(
            f"{whose} wants an API key from ${env_name}, which is not set in this environment",
            hint=f"export {env_name}=… (the key is read from the environment, never argv)",
        )
    return value
