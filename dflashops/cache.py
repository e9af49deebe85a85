"""dflashops' cache folder, shared by the engine wheels and the lab (standard library only)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$DFLASHOPS_CACHE``, else ``$XDG_CACHE_HOME/dflashops`` (default ``~/.cache/dflashops``)."""
    explicit = os.environ.get("DFLASHOPS_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "dflashops"
