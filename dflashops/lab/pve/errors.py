"""Errors the double answers with, shaped like PVE's (status code, message in the reason phrase).

PVE puts the error text into the HTTP reason phrase and, for parameter errors, a per-parameter
``errors`` object into the JSON body. A plain ``die`` in a PVE API handler becomes HTTP 500.
"""

from __future__ import annotations


class ApiError(Exception):
    """An API call failed the way PVE fails it."""

    def __init__(self, status: int, message: str, errors: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors or {}


def param_error(errors: dict[str, str]) -> ApiError:
    """PVE's ``raise_param_exc``: HTTP 400 with one message per parameter."""
    return ApiError(400, "Parameter verification failed.", errors)


def perm_error(what: str | None = None) -> ApiError:
    """PVE's ``raise_perm_exc``."""
    return ApiError(403, "Permission check failed" + (f" ({what})" if what else ""))


def fail(message: str) -> ApiError:
    """A ``die`` inside a PVE API handler: HTTP 500 with the message as reason."""
    return ApiError(500, message)


class TaskFailed(Exception):
    """A worker task ended with an error; the message becomes the task's exitstatus."""
