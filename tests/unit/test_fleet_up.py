"""``up`` over several pairs (issue 36), with the injected steps of tests/unit/test_up_runner.py:
a dry run plans every pair at once (the inventory's ``parallel``), and every pair's provision
step gets the run's one PVE session."""

from __future__ import annotations

import threading
from pathlib import Path

from dflashops.playbook.models import Playbook
from dflashops.remote import SshConnection
from dflashops.up.inputs import DrafterFiles
from dflashops.up.outputs import StepOutput
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
