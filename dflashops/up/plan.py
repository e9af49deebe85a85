"""What a run of ``up`` does for one pair, and why: pure functions over the pair's record and
the digests of each step's inputs.

A step's digest chains its own inputs onto the digest of the step before it, so a step whose
inputs are unchanged but that follows a step that runs again runs again too (its inputs are
that step's outputs). A step runs when ``--from`` reaches it, when it never succeeded, when its
inputs changed, when an earlier step runs, when it went on over drafter errors with
``--force`` and this run has no ``--force``, or when what it left is gone (``stale``: a server
``launch`` started that no longer serves); otherwise it is skipped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:  # `dflashops --help` imports this module for STEPS: no pydantic there
    from dflashops.up.record import PairRecord

STEPS = ("provision", "drafter", "launch", "smoke", "bench", "tune", "report")
Action = Literal["run", "skip", "not asked"]
CHAINED = "an earlier step's inputs changed"  # own inputs the same, the chain's not


def short_digest(value: Any) -> str:
    """sha256 of ``value``'s canonical JSON (sorted keys), first 16 hex digits."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def chain_digests(inputs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Each step's digest: its own inputs (``inputs[step]``) and the digest of the step before."""
    digests: dict[str, str] = {}
    before = ""
    for step in STEPS:
        before = short_digest({"step": step, "inputs": dict(inputs[step]), "after": before})
        digests[step] = before
    return digests


def input_digests(own: Mapping[str, Any]) -> dict[str, str]:
    """Each own input's short digest, kept in the record to say which input changed."""
    return {key: short_digest(value) for key, value in own.items()}


@dataclass(frozen=True)
class PlannedStep:
    step: str
    action: Action
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"step": self.step, "action": self.action, "reason": self.reason}


def check_step(name: str | None, option: str) -> str | None:
    """``name`` when it is a step, else a ValueError naming the steps."""
    if name is not None and name not in STEPS:
        raise ValueError(f"{option} {name}: not a step; one of {', '.join(STEPS)}")
    return name


def plan_pair(
    record: PairRecord | None,
    digests: Mapping[str, str],
    inputs: Mapping[str, Mapping[str, str]],
    *,
    from_step: str | None = None,
    until: str | None = None,
    force: bool = False,
    stale: Mapping[str, str] | None = None,
) -> list[PlannedStep]:
    """One planned step per step name, in order (see the module doc for the rules).

    ``inputs``: each step's :func:`input_digests`, compared with the record's to name what
    changed. ``until``: steps after it are "not asked" (the lab demo stops after ``bench``).
    ``stale``: step -> why what it left is gone; such a step runs though done with the same
    inputs."""
    check_step(from_step, "--from")
    check_step(until, "until")
    start = STEPS.index(from_step) if from_step else len(STEPS)
    stop = STEPS.index(until) if until else len(STEPS) - 1
    planned: list[PlannedStep] = []
    earlier: str | None = None  # the first step of this run that runs
    for index, step in enumerate(STEPS):
        if index > stop:
            planned.append(PlannedStep(step, "not asked", f"this run stops after {until}"))
            continue
        reason = _why_run(record, step, digests, inputs, force)
        if index >= start:
            reason = f"--from {from_step}"
        elif earlier is not None and reason in (None, CHAINED):
            reason = f"{earlier} runs again before it"
        elif reason is None and stale and step in stale:
            reason = stale[step]
        if reason is None:
            done = record.steps[step] if record else None
            when = done.finished_at.strftime("%Y-%m-%d %H:%M") if done and done.finished_at else "?"
            planned.append(PlannedStep(step, "skip", f"done {when} UTC, inputs unchanged"))
            continue
        earlier = earlier or step
        planned.append(PlannedStep(step, "run", reason))
    return planned


def _why_run(
    record: PairRecord | None,
    step: str,
    digests: Mapping[str, str],
    inputs: Mapping[str, Mapping[str, str]],
    force: bool,
) -> str | None:
    done = record.step(step) if record else None
    if done is None:
        return "never run"
    if done.status == "failed":
        return f"failed last time: {done.error or 'no reason recorded'}"
    if done.status != "ok":
        return f"did not finish last time ({done.status})"
    if done.digest != digests[step]:
        own = inputs.get(step, {})
        changed = [k for k, v in own.items() if done.inputs.get(k) != v]
        if changed:
            return f"changed: {', '.join(changed)}"
        return CHAINED
    if done.forced and not force:
        return "went on over drafter errors with --force before; this run has no --force"
    return None


def runs_anything(planned: list[PlannedStep]) -> bool:
    return any(p.action == "run" for p in planned)
