"""Running a command on this machine for the lab's hosts and their network.

Every command is bounded by a timeout; with ``check``, a failure becomes a
:class:`~dflashops.lab.errors.LabError` naming the command and the tail of its stderr.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

from dflashops.errors import tail_lines
from dflashops.lab.errors import LabError

CMD_TIMEOUT_S = 15.0


def run_command(
    argv: Sequence[str],
    *,
    input: bytes | None = None,
    timeout: float = CMD_TIMEOUT_S,
    check: bool = True,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` here, bounded by ``timeout``; with ``check``, a failure is a LabError."""
    try:
        done = subprocess.run(
            list(argv), input=input, capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise LabError(f"`{shlex.join(argv)}` did not finish within {timeout:.0f} s") from None
    if check and done.returncode != 0:
        detail = tail_lines(done.stderr.decode(errors="replace"), 3)
        raise LabError(f"`{shlex.join(argv)}` exited {done.returncode}: {detail}")
    return done
