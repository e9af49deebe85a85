"""A stop signal that lands inside a logging call still stops training.

speculators' handler raises its TrainingInterruptedError wherever the main thread is; inside a
StreamHandler's flush, logging swallowed it and a train stage killed after step 8 of 20 ran all
20 (the suite's test_train_resumes_from_the_last_checkpoint, once). Here a real signal is sent
from inside a stream's flush, with a stand-in for speculators' exception."""

from __future__ import annotations

import io
import logging
import os
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from dflashops.training.interrupts import interrupts_pass_through_logging


class Interrupted(Exception):
    """speculators' TrainingInterruptedError: an Exception, raised by a signal handler."""


class SignalOnFlush(io.StringIO):
    """A log stream that receives SIGUSR1 while flushing (the handler runs in there)."""

    def flush(self) -> None:
        os.kill(os.getpid(), signal.SIGUSR1)
        total = 0
        for i in range(10_000):  # bytecode boundaries: Python runs the handler in this loop
            total += i
        super().flush()


RECEIVED: list[int] = []  # the signals the stand-in handler ran for


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    def handler(signum: int, _frame: FrameType | None) -> None:
        RECEIVED.append(signum)
        raise Interrupted("SIGUSR1")

    RECEIVED.clear()
    previous = signal.signal(signal.SIGUSR1, handler)
    log = logging.getLogger("dflashops-test-interrupts")
    log.propagate = False
    stream_handler = logging.StreamHandler(SignalOnFlush())
    log.addHandler(stream_handler)
    raise_exceptions, logging.raiseExceptions = logging.raiseExceptions, False  # quiet stderr
    try:
        yield log
    finally:
        logging.raiseExceptions = raise_exceptions
        log.removeHandler(stream_handler)
        signal.signal(signal.SIGUSR1, previous)


def test_without_it_logging_swallows_the_interruption(logger: logging.Logger) -> None:
    returned = logger.warning("saving checkpoint")  # type: ignore[func-returns-value]

    # the handler ran and raised, yet the call returned as if nothing happened: the stop is lost
    assert RECEIVED == [signal.SIGUSR1] and returned is None


def test_with_it_the_interruption_reaches_the_trainer(logger: logging.Logger) -> None:
    with interrupts_pass_through_logging(Interrupted), pytest.raises(Interrupted):
        logger.warning("saving checkpoint")
    assert RECEIVED == [signal.SIGUSR1]


def test_other_logging_errors_stay_logging_errors(logger: logging.Logger) -> None:
    original = logging.Handler.handleError
    with interrupts_pass_through_logging(KeyboardInterrupt):
        logger.warning("saving checkpoint")  # Interrupted is not the one passed through
    assert RECEIVED == [signal.SIGUSR1]  # it arrived and stayed a logging error
    assert logging.Handler.handleError is original  # restored
