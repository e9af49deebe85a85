"""One vLLM server at a time on this machine (2 cores): a machine-wide lock file.

Every test that starts a vLLM server — the session pool, or launch tests starting one in a lab
container — holds the slot while the server runs. Separate pytest processes (parallel helpers,
a developer's shell) queue on it instead of starting servers side by side.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

SLOT_FILE = Path(os.environ.get("DFLASHOPS_VLLM_SLOT", "/tmp/dflashops-vllm.slot"))
WAIT_S = 900.0

# Holders in this process that give the slot up on request (the session's server pool): a test
# that needs the slot stops them first, instead of waiting on its own process's lock forever.
_YIELDING: list[Callable[[], None]] = []


def yields_slot(stop: Callable[[], None]) -> None:
    """Register ``stop`` (stops a server and releases its slot) to run before another acquire."""
    _YIELDING.append(stop)


class VllmSlot:
    """``acquire()`` blocks (bounded) until no other holder runs a server; ``release()`` frees."""

    def __init__(self, path: Path = SLOT_FILE) -> None:
        self.path = path
        self._fh: IO[str] | None = None

    def acquire(self, wait_s: float = WAIT_S) -> None:
        if self._fh is not None:
            return
        for stop in list(_YIELDING):
            stop()
        fh = self.path.open("a+")
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    fh.close()
                    raise TimeoutError(
                        f"another vLLM server held {self.path} for {wait_s:.0f}s"
                    ) from None
                time.sleep(1.0)
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self._fh = fh

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    def __enter__(self) -> VllmSlot:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
