"""paramiko, fabric and invoke never print to stderr on their own (issue 32): in a plain run
nobody configures their loggers, and logging's last resort would print their warnings as bare
stray lines. With a root handler (``--debug``) every record is still shown.

Each case runs in a child process: inside pytest, the logging plugin's handlers would hide the
last resort."""

from __future__ import annotations

import subprocess
import sys

import pytest

LOGGERS = ("paramiko.transport", "fabric", "invoke", "dflashops.remote")
CHILD = """
import logging, sys
import dflashops.remote
if sys.argv[1] == "debug":
    logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(name)s: %(message)s")
for name in sys.argv[2:]:
    logging.getLogger(name).error("Socket exception: Connection reset by peer (104)")
"""


def child_stderr(mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, *LOGGERS],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stderr


def test_library_loggers_print_nothing_in_a_plain_run() -> None:
    assert child_stderr("plain") == ""


@pytest.mark.parametrize("name", LOGGERS)
def test_debug_logging_still_shows_them(name: str) -> None:
    assert f"{name}: Socket exception: Connection reset by peer (104)" in child_stderr("debug")
