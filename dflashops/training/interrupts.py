"""A stop signal must stop the train stage even when it lands inside a logging call.

speculators' SIGINT/SIGTERM handler raises ``TrainingInterruptedError`` wherever the main thread
is, and ignores every later signal. When the signal lands while a logging handler writes (the
stage log's ``StreamHandler`` flushing, say), ``StreamHandler.emit`` catches the exception as a
logging error, prints it to the log and carries on: the interruption is lost and training runs
to its end. Seen in this project's suite: a stage sent SIGTERM after step 8 of 20 logged
"Received SIGTERM" inside ``stream.flush()``, then trained all 20 steps and exited 0. Within
:func:`interrupts_pass_through_logging`, ``logging.Handler.handleError`` raises such an
exception again instead of swallowing it, so it reaches speculators' shutdown wrapper, which
saves and returns, and the stage fails as interrupted.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def interrupts_pass_through_logging(interrupt: type[BaseException]) -> Iterator[None]:
    """Within the block, a logging handler's error that is an ``interrupt`` propagates."""
    original = logging.Handler.handleError

    def handle_error(self: logging.Handler, record: logging.LogRecord) -> None:
        caught: Any = sys.exc_info()[1]
        if isinstance(caught, interrupt):
            raise caught
        original(self, record)

    logging.Handler.handleError = handle_error  # type: ignore[method-assign]
    try:
        yield
    finally:
        logging.Handler.handleError = original  # type: ignore[method-assign]
