"""The lab's own error. It lives with the lab, not in :mod:`dflashops.errors`, because the wheel
dflashops installs in a container leaves the lab out and nothing there may name it."""

from __future__ import annotations

from dflashops.errors import DflashopsError


class LabError(DflashopsError):
    """The local lab could not be started, queried or torn down."""
