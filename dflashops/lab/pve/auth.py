"""Authentication like PVE's: password tickets with CSRF tokens, and API tokens.

- ``POST /access/ticket`` (``username``, ``password``; the password may also be a valid ticket,
  which is how clients renew) returns ``ticket`` and ``CSRFPreventionToken``. Requests carry the
  ticket in the ``PVEAuthCookie`` cookie; non-GET requests also need the CSRF header.
- ``Authorization: PVEAPIToken=<user>@<realm>!<tokenid>=<secret>``. A token acts as
  ``<user>@<realm>!<tokenid>``, which is *not* ``root@pam``: root-only operations (``devN``,
  ``skiplock``, bind mounts, ...) need a root@pam password login, as on real PVE.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from dflashops.lab.pve.errors import ApiError

TICKET_LIFETIME = 7200  # PVE tickets are valid for two hours


@dataclass(frozen=True)
class Caller:
    """Who made a request: ``user`` is ``name@realm``; ``tokenid`` is set for API tokens."""

    user: str
    tokenid: str | None = None

    @property
    def authid(self) -> str:
        return f"{self.user}!{self.tokenid}" if self.tokenid else self.user

    @property
    def is_root_pam(self) -> bool:
        """PVE's ``$authuser eq 'root@pam'``: only a root@pam *ticket*, never a token."""
        return self.user == "root@pam" and self.tokenid is None


class Authenticator:
    """Checks passwords, tickets and tokens against the credentials given at start."""

    def __init__(self, users: Mapping[str, str], tokens: Mapping[str, str]) -> None:
        self._users = dict(users)
        self._tokens = dict(tokens)  # "user@realm!tokenid" -> secret
        self._key = secrets.token_bytes(32)

    def _sign(self, text: str) -> str:
        digest = hmac.new(self._key, text.encode(), hashlib.sha256).digest()
        return base64.b64encode(digest).decode()

    def _ticket(self, user: str, stamp: int) -> str:
        plain = f"PVE:{user}:{stamp:08X}"
        return f"{plain}::{self._sign(plain)}"

    def csrf_token(self, user: str, stamp: int) -> str:
        return f"{stamp:08X}:{self._sign(f'{stamp:08X}:{user}')}"

    def verify_ticket(self, ticket: str) -> str | None:
        """The user a valid, unexpired ticket belongs to, or None."""
        parts = ticket.split(":")
        if len(parts) != 5 or parts[0] != "PVE" or parts[3] != "":
            return None
        user, stamp_hex = parts[1], parts[2]
        try:
            stamp = int(stamp_hex, 16)
        except ValueError:
            return None
        if not hmac.compare_digest(ticket, self._ticket(user, stamp)):
            return None
        age = time.time() - stamp
        return user if -300 <= age <= TICKET_LIFETIME else None

    def login(self, username: str, password: str, realm: str | None = None) -> dict[str, object]:
        """``POST /access/ticket``: a new ticket for a password or a still valid ticket."""
        user = username if "@" in username else f"{username}@{realm or 'pam'}"
        known = self._users.get(user)
        by_password = known is not None and hmac.compare_digest(known, password)
        by_ticket = self.verify_ticket(password) == user
        if not (by_password or by_ticket):
            raise ApiError(401, "authentication failure")
        stamp = int(time.time())
        return {
            "username": user,
            "ticket": self._ticket(user, stamp),
            "CSRFPreventionToken": self.csrf_token(user, stamp),
            "cap": {},
        }

    def authenticate(self, method: str, headers: Mapping[str, str]) -> Caller:
        """Identify the caller of a request or raise PVE's 401."""
        authorization = headers.get("authorization", "")
        if authorization.startswith("PVEAPIToken="):
            return self._token_caller(authorization.removeprefix("PVEAPIToken="))
        ticket = _cookie(headers.get("cookie", ""), "PVEAuthCookie")
        if ticket is None:
            raise ApiError(401, "No ticket")
        user = self.verify_ticket(ticket)
        if user is None:
            raise ApiError(401, "permission denied - invalid PVE ticket")
        if method != "GET":
            token = headers.get("csrfpreventiontoken", "")
            stamp_hex = token.partition(":")[0]
            valid = False
            try:
                valid = hmac.compare_digest(token, self.csrf_token(user, int(stamp_hex, 16)))
            except ValueError:
                valid = False
            if not valid:
                raise ApiError(401, "Permission denied - invalid csrf token")
        return Caller(user)

    def _token_caller(self, value: str) -> Caller:
        authid, separator, secret = value.partition("=")
        user, bang, tokenid = authid.partition("!")
        known = self._tokens.get(authid)
        if not separator or not bang or known is None or not hmac.compare_digest(known, secret):
            raise ApiError(401, "authentication failure")
        return Caller(user, tokenid)


def _cookie(header: str, name: str) -> str | None:
    # tickets hold ':', '=' and base64 characters, so split by hand rather than trust a parser
    for part in header.split(";"):
        key, equals, value = part.strip().partition("=")
        if equals and key == name:
            return unquote(value.strip('"'))
    return None
