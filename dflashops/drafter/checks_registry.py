"""The drafter against its reference entry, key by key, with the reference's provenance."""

from __future__ import annotations

import re
from collections.abc import Mapping

from dflashops.drafter.context import CheckContext
from dflashops.drafter.engine import DrafterShape
from dflashops.drafter.keys import MISSING, first_present, json_equal, show
from dflashops.drafter.registry import RegistryEntry

BASIS_TEXT: Mapping[str, str] = {
    "original": "read from the original file",
    "agreed": "third-party sources agree; original file not read",
    "structural": "fixed by the target model",
    "rule": "z-lab's layer rule, corroborated",
    "single": "one third-party source",
    "derived": "derived, not observed",
}


_URL = re.compile(r"https?://\S+")


def source_link(ref: RegistryEntry, source_id: str) -> str:
    """What an operator opens to see a source: its URL, else its id (the entry explains it)."""
    found = _URL.search(ref.sources.get(source_id, ""))
    return found.group(0).rstrip(".,;)") if found else source_id


def check_registry(ctx: CheckContext, ref: RegistryEntry, shape: DrafterShape) -> None:
    """A certain reference value that differs is an error; an uncertain one, or one that does
    not matter for this drafter's shape (a window with no sliding layer), is a note."""
    for rv in ref.keys:
        hit = first_present(ctx.cfg, rv.read_from)
        key, value = hit if hit is not None else (rv.path, MISSING)
        if value is not MISSING and json_equal(value, rv.value):
            continue
        relevant = rv.when != "sliding" or shape.has_sliding
        why = rv.why
        if not relevant:
            why = (
                f"Unused while no drafter layer slides; {ref.name} uses {show(rv.value)} for "
                "its sliding layers, so fixing layer_types needs it too."
            )
        certainty = "certain" if rv.certain else "not certain"
        sources = "; ".join(source_link(ref, s) for s in rv.sources)
        ctx.add(
            "error" if rv.certain and relevant else "info",
            key,
            show(rv.value),
            show(value),
            f"{why} [{ref.name}: {certainty}; {BASIS_TEXT[rv.basis]}; sources: {sources}]",
            check="registry",
        )
