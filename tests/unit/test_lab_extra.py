"""The lab's own dependency (cryptography>=42, for the PVE double's CA) is the ``lab`` extra:
without it a lab command fails with one line naming the install, and the rest of the CLI works.

paramiko (under fabric) also needs cryptography, but from 3.3 on: an install without the extra
can hold one too old for the lab, or (with ``--no-deps``) none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

WITHOUT = "import sys; sys.modules['cryptography'] = None"
TOO_OLD = "import cryptography; cryptography.__version__ = '41.0.7'"


def run(
    setup: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    code = f"{setup}; from dflashops.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


@pytest.mark.parametrize(
    ("setup", "why"), [(WITHOUT, "which is not installed"), (TOO_OLD, "not 41.0.7")]
)
@pytest.mark.parametrize("command", ["status", "down"])
def test_a_lab_command_names_the_extra(setup: str, why: str, command: str, tmp_path: Path) -> None:
    # a lab of its own: were the check to let `lab down` through, no one's lab is touched
    env = {
        **os.environ,
        "DFLASHOPS_LAB_STATE": str(tmp_path / "state"),
        "DFLASHOPS_LAB_RUN": str(tmp_path / "run"),
    }
    done = run(setup, "lab", command, env=env)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: the lab needs cryptography>=42 (dflashops' `lab` extra)")
    assert why in line and "pip install 'dflashops[lab]'" in line


def test_the_rest_of_the_cli_needs_no_extra() -> None:
    done = run(
        WITHOUT,
        *("tune-offline", "--acceptance", "0.8,0.5,0.3", "--step-cost", "1:0.020,4:0.026"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["best_k"] == 3
