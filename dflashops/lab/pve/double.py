"""Start and stop the PVE double: state directory, TLS files, HTTPS server thread."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dflashops.lab.pve.apischema import ApiSchema
from dflashops.lab.pve.server import HttpsFrontend, PveApi
from dflashops.lab.pve.state import DoubleSettings, DoubleState
from dflashops.lab.pve.tls import ensure_tls


@dataclass(frozen=True)
class Credentials:
    """How to log in: root@pam's password, and API tokens as ``(user, token name, secret)``."""

    user: str
    password: str
    tokens: tuple[tuple[str, str, str], ...] = ()

    def token(self, name: str | None = None) -> tuple[str, str, str]:
        return next(t for t in self.tokens if name is None or t[1] == name)


class PveDouble:
    """A running PVE API double on ``https://<host>:<port>/api2/json``."""

    def __init__(self, settings: DoubleSettings, host: str = "127.0.0.1", port: int = 0) -> None:
        self.settings = settings
        self.host = host
        settings.state_dir.mkdir(parents=True, exist_ok=True)
        hosts = settings.tls_hosts if host in settings.tls_hosts else (host, *settings.tls_hosts)
        self.tls = ensure_tls(settings.state_dir / "tls", hosts)
        self.state = DoubleState(settings, ApiSchema.load())
        self._frontend = HttpsFrontend(
            PveApi(self.state, self.state.schema), self.tls.server_context(), host, port
        )
        self.port = self._frontend.port

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        return f"{self.url}/api2/json"

    @property
    def ca_path(self) -> Path:
        return self.tls.ca_cert

    @property
    def etc_pve(self) -> Path:
        return self.settings.etc_pve_dir

    @property
    def credentials(self) -> Credentials:
        tokens = tuple(
            (authid.partition("!")[0], authid.partition("!")[2], secret)
            for authid, secret in self.settings.tokens.items()
        )
        user = "root@pam" if "root@pam" in self.settings.users else next(iter(self.settings.users))
        return Credentials(user, self.settings.users[user], tokens)

    def start(self) -> PveDouble:
        self._frontend.start()
        return self

    def stop(self, task_timeout: float = 10.0) -> None:
        self._frontend.stop()
        self.state.tasks.wait_all(task_timeout)

    def __enter__(self) -> PveDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, *, token: str | None = None, user: str | None = None, **kwargs: Any) -> Any:
        """A ``proxmoxer.ProxmoxAPI`` for this double, verifying TLS against its CA.

        Password login as ``user`` (default root@pam); ``token=<name>`` uses that API token.
        """
        from proxmoxer import ProxmoxAPI

        options: dict[str, Any] = {
            "port": self.port,
            "verify_ssl": str(self.ca_path),
            "timeout": 30,
            **kwargs,
        }
        if token is not None:
            token_user, name, secret = self.credentials.token(token)
            options.update(user=token_user, token_name=name, token_value=secret)
        else:
            login = user or self.credentials.user
            options.update(user=login, password=self.settings.users[login])
        return ProxmoxAPI(self.host, backend="https", **options)


def default_settings(state_dir: Path, **overrides: Any) -> DoubleSettings:
    """Settings with a random root@pam password and one ``root@pam!dflashops`` token."""
    settings = DoubleSettings(
        state_dir=state_dir,
        users={"root@pam": secrets.token_urlsafe(16)},
        tokens={"root@pam!dflashops": secrets.token_hex(16)},
    )
    return replace(settings, **overrides)


@contextlib.contextmanager
def serve_double(
    state_dir: Path, *, host: str = "127.0.0.1", port: int = 0, **overrides: Any
) -> Iterator[PveDouble]:
    """Run a double in this process for the duration of the block (for tests and ``lab up``)."""
    double = PveDouble(default_settings(state_dir, **overrides), host=host, port=port)
    with double:
        yield double
