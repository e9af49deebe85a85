"""The roofline options ``tune`` and ``bench`` share, and the request they make."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click

from dflashops.cli.options import FiniteFloatRange

ROOFLINE_FIELDS = ("gpu", "bandwidth_gbps", "tp", "weights", "active_params", "extra_bytes")


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
            # a millionth of a GPU's to a thousand times one: beyond, the arithmetic overflows
            type=FiniteFloatRange(min=0.001, max=1e6),
            help="Roofline: GB/s per GPU (instead of the GPU table), 0.001 to 1e6.",
        ),
        click.option(
            "--tp", type=click.IntRange(1, 4096), help="Roofline: tensor-parallel degree."
        ),
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
