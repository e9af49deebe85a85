"""The largest k a DFlash drafter can serve: ``block_size - 1``, read from its config.

A DFlash drafter fills ``block_size - 1`` masked positions per step, so ``launch`` refuses a
larger ``num_speculative_tokens`` (the drafter check's error). The live tuner asks the
container's drafter once, before its first probe, and keeps its range under that ceiling
instead of spending a launch on a k that can only be refused.
"""

from __future__ import annotations

import json
import posixpath

from dflashops.drafter.formats import checked_view
from dflashops.drafter.keys import is_int
from dflashops.errors import RemoteError
from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection, get_text


def dflash_k_ceiling(conn: SshConnection, book: Playbook) -> int | None:
    """``block_size - 1`` of the playbook's DFlash drafter in the container, or None (another
    method, no readable config or no block size: the drafter check speaks for those)."""
    if book.drafter.method != "dflash" or book.drafter.model is None:
        return None
    path = posixpath.join(str(book.drafter.model.path), "config.json")
    try:
        config = json.loads(get_text(conn, path))
    except (RemoteError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    view = checked_view(config)
    block = view.get("block_size", view.get("dflash_config", {}).get("block_size"))
    return int(block) - 1 if is_int(block) and int(block) > 1 else None
