"""``up`` over several pairs (issue 36), with the injected steps of tests/unit/test_up_runner.py:
a dry run plans every pair at once (the inventory's ``parallel``), every pair's provision step
gets the run's one PVE session, and provision steps run at once while the loop after them keeps
its own bound."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection
from dflashops.up.inputs import DrafterFiles
from dflashops.up.outputs import StepOutput
from dflashops.up.plan import STEPS
from dflashops.up.steps import PairWork
from tests.unit.test_up_runner import Rig


def test_a_dry_run_plans_every_pair_at_once(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    assert rig.up("lab-ct1", "lab-ct2") == {"lab-ct1": "done", "lab-ct2": "done"}
    # each pair's plan reads the drafter's files in its container: both must be reading at
    # the same time for either to go on
    both = threading.Barrier(2, timeout=10)
    files = rig.files

    def fingerprint(conn: SshConnection, container: str, book: Playbook) -> DrafterFiles:
        both.wait()
        return files

    rig.fingerprint = fingerprint  # type: ignore[method-assign]
    assert rig.up("lab-ct1", "lab-ct2", dry_run=True) == {
        "lab-ct1": "planned",
        "lab-ct2": "planned",
    }
    assert rig.result is not None
    assert [p.container for p in rig.result.pairs] == ["lab-ct1", "lab-ct2"]  # given order
    for pair in rig.result.pairs:
        assert {step.action for step in pair.plan} == {"skip"}


def test_every_pairs_provision_shares_the_runs_pve_session(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    sessions: list[object] = []
    table = rig.table()
    provision = table["provision"]

    def recording(work: PairWork) -> tuple[str, StepOutput]:
        sessions.append(work.pve)
        return provision(work)

    table["provision"] = recording
    rig.up("lab-ct1", "lab-ct2", steps=table)
    assert len(sessions) == 2 and sessions[0] is sessions[1] and sessions[0] is not None


def test_provision_steps_run_at_once_while_the_loop_keeps_its_own_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Provision steps up to the inventory's parallel at once; the steps after, a run's
    default (made 1 here) at once."""
    monkeypatch.setattr("dflashops.up.runner.DEFAULT_PARALLEL", 1)
    rig = Rig(tmp_path)
    table = rig.table()
    provision = table["provision"]
    both = threading.Barrier(2, timeout=10)

    def together(work: PairWork) -> tuple[str, StepOutput]:
        both.wait()  # both pairs provision at the same time, or neither goes on
        return provision(work)

    table["provision"] = together
    said: list[tuple[str, str]] = []
    outcome = rig.up(
        "lab-ct1", "lab-ct2", steps=table, on_event=lambda p, s, m: said.append((p, m))
    )
    assert outcome == {"lab-ct1": "done", "lab-ct2": "done"}
    loop = [e for e in rig.events if e.split(": ", 1)[1] in STEPS[1:]]
    first = loop[0].split(":")[0]
    # one pair's whole loop, then the other's: never interleaved
    assert [e.split(":")[0] for e in loop] == [first] * 6 + [
        next(n for n in ("lab-ct1", "lab-ct2") if n != first)
    ] * 6
    assert any("waiting: 1 pair(s) run past provision at once" in m for _p, m in said)
