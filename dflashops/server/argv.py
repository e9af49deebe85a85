"""Reading an engine command line (the spec's ``argv``, or ``/proc/PID/cmdline``)."""

from __future__ import annotations

from collections.abc import Sequence


def flag_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``--flag VALUE`` or ``--flag=VALUE`` (the last one wins, as argparse's)."""
    value = None
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value
