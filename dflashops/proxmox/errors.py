"""Errors of ``provision`` and ``destroy``, and the signal that a step lost a race."""

from __future__ import annotations

from dflashops.errors import DflashopsError


class ProvisionError(DflashopsError):
    """A container could not be provisioned (refused, or a step failed)."""


class Replan(Exception):
    """A step lost a race (the digest changed, the vmid was just taken, the container started
    meanwhile): gather facts again and plan from what is there now."""
