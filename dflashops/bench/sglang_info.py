"""What a running SGLang server says about itself: its release and what it speculates.

SGLang has no ``/version``; its ``/server_info`` (``/get_server_info`` before 0.5.x, deprecated
but still served by 0.5.16) returns the server's arguments with ``version``
(``srt/entrypoints/http_server.py``). From them ``bench --url`` learns the engine and release
(the accept-rate formula of SGLang's log depends on it) and the speculation actually in effect:
``speculative_algorithm`` and ``speculative_num_draft_tokens``, the verify window, which is
k + 1 as ``launch`` renders every SGLang method (EAGLE's ``speculative_num_steps`` equals k only
for the chain, top-k 1). Read in the real 0.5.16 server's replies
(``tests/fixtures/sglang/real-0.5.16-cpu-*-generate.json``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dflashops.playbook.engine_methods import sglang_k, sglang_method

# 0.5.x serves the first; older releases only the second
SERVER_INFO_PATHS = ("/server_info", "/get_server_info")


@dataclass(frozen=True)
class ServedSpeculation:
    """The speculation a server reports it runs (``none``: off)."""

    method: str
    k: int | None

    def describe(self) -> str:
        return (
            self.method if self.method == "none" or self.k is None else f"{self.method} k={self.k}"
        )


@dataclass(frozen=True)
class SglangInfo:
    version: str
    speculation: ServedSpeculation


def parse_server_info(data: Any) -> SglangInfo | None:
    """SGLang's ``/server_info`` reply, or None when it is not one (no ``version`` beside the
    server arguments, of which ``speculative_algorithm`` is there even when None)."""
    if not isinstance(data, dict) or "speculative_algorithm" not in data:
        return None
    version = data.get("version")
    if not isinstance(version, str) or not version:
        return None
    algorithm = data.get("speculative_algorithm")
    method = sglang_method(algorithm if isinstance(algorithm, str) else None)
    window = data.get("speculative_num_draft_tokens")
    k = sglang_k(window) if method != "none" and isinstance(window, int) else None
    return SglangInfo(version=version, speculation=ServedSpeculation(method=method, k=k))
