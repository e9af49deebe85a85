"""The rules of a playbook's ``tune`` load sweep (``load``, ``load_mix``, ``tpot_slo_ms``), in
one function the playbook model and ``tune --load``'s own settings both apply."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence


def load_problem(
    load: Sequence[int] | None,
    load_mix: Mapping[int, float] | None,
    tpot_slo_ms: float | None,
) -> str | None:
    """What is wrong with a ``tune`` load section, or None (the tuner's own settings reuse it)."""
    if load is not None:
        if not load:
            return "load: give at least one concurrency level"
        if any(level < 1 for level in load):
            return "load: levels are concurrencies, 1 or more"
        if any(b <= a for a, b in itertools.pairwise(load)):
            return f"load: levels must be ascending without repeats, got {list(load)}"
    if load is None and (load_mix is not None or tpot_slo_ms is not None):
        return "load_mix and tpot_slo_ms apply to a load sweep: set load too"
    if load_mix is not None:
        strangers = sorted(set(load_mix) - set(load or ()))
        if strangers:
            return f"load_mix: level(s) {strangers} are not in load {list(load or ())}"
        if any(weight < 0 for weight in load_mix.values()):
            return "load_mix: weights must be 0 or more"
        if not sum(load_mix.values()) > 0:
            return "load_mix: the weights must sum to more than 0"
    return None
