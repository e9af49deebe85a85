"""The one type of a progress callback: a long step tells it each thing it starts or waits for,
as one short line (the CLI shows it on a spinner, the lab demo prints it, tests collect it)."""

from __future__ import annotations

from collections.abc import Callable

Say = Callable[[str], None]


def quiet(_message: str) -> None:
    """The callback for a caller that wants no progress."""
