"""The roofline options ``tune`` and ``bench`` share, and the request they make."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import click

ROOFLINE_FIELDS = ("gpu", "bandwidth_gbps", "tp", "weights", "active_params", "extra_bytes")


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses ``nan`` and ``inf`` (NaN passes every comparison
    a range makes, and either one turns every prediction downstream into NaN or 0)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


def roofline_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add --gpu, --bandwidth-gbps, --tp, --weights, --active-params and --extra-bytes; the
    command receives them as one ``roofline: RooflineRequest`` keyword argument."""

    @functools.wraps(fn)
    def command(*args: Any, **kwargs: Any) -> Any:
        from dflashops.roofline.request import RooflineRequest

        given = {key: kwargs.pop(key) for key in ROOFLINE_FIELDS}
        return fn(*args, roofline=RooflineRequest(**given), **kwargs)

    options = [
        click.option("--gpu", help='Roofline: GPU name, e.g. "RTX A6000", H200.'),
        click.option(
            "--bandwidth-gbps",
            type=FiniteFloatRange(min=0, min_open=True),
            help="Roofline: GB/s per GPU (instead of the GPU table).",
        ),
        click.option("--tp", type=click.IntRange(min=1), help="Roofline: tensor-parallel degree."),
        click.option(
            "--weights",
            metavar="PATH|SIZE",
            help="Roofline: local safetensors file/dir (headers only) or a size such as 54GB.",
        ),
        click.option(
            "--active-params",
            metavar="FRACTION|COUNT",
            help="Roofline, MoE: active share (0.1) or count (3B; needs the parameter count).",
        ),
        click.option(
            "--extra-bytes",
            metavar="SIZE",
            help="Roofline: drafter/KV bytes read per step (e.g. 2GB).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command
