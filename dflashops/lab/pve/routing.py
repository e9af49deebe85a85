"""The table of implemented endpoints: ``(METHOD, path template)`` to a handler function."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dflashops.lab.pve.auth import Caller
from dflashops.lab.pve.state import DoubleState


@dataclass
class Request:
    """A validated API call: typed parameters (path parameters included) and its caller."""

    state: DoubleState
    caller: Caller
    params: dict[str, Any]

    @property
    def node(self) -> str:
        return str(self.params["node"])

    @property
    def vmid(self) -> int:
        return int(self.params["vmid"])


Handler = Callable[[Request], Any]
ROUTES: dict[tuple[str, str], Handler] = {}


def route(method: str, template: str) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES[(method, template)] = handler
        return handler

    return register
